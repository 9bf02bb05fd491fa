//! Hex sha256 of a stream: how the default model and a golden's model file are identified.

use sha2::{Digest, Sha256};
use std::io::{self, Read};

/// Hex sha256 of everything `reader` yields, read in 1 MiB chunks.
pub fn hex_digest(mut reader: impl Read) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
