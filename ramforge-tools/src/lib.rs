//! The library half of `ramforge-tools`: what outside code (the fuzz targets) must reach of the
//! command-line tools. Today that is [`openai`], the reader of the server's request bodies; the
//! commands themselves live in the binary.

pub mod openai;
