//! OpenAI's wire format as `serve` reads and answers it: request bodies read strictly into
//! engine terms (`request`, over the field reader `fields`) and OpenAI-shaped errors
//! (`errors`), and tool calls and reasoning in the output (`tools`). A library module, so the fuzz targets reach the request reader as the server
//! runs it.

pub mod errors;
pub mod fields;
pub mod request;
pub mod tools;
