//! `dequant-stdio`: the Rust side of the gguf-py oracle (`scripts/dequant_oracle.py`).
//!
//! Requests on stdin, repeated until end of input: ggml type id (u32 LE), element count
//! (u64 LE), then exactly `row_size(count)` bytes of blocks. Each answer on stdout is the
//! `count` dequantized values as f32 LE. `dequant-stdio --table` prints instead one line
//! `id name block_size type_size supported` per known type.

use ramforge_quant::{dequantize_row, is_supported, GgmlType};
use std::io::{self, BufWriter, ErrorKind, Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let result = if std::env::args().nth(1).as_deref() == Some("--table") {
        print_table()
    } else {
        serve()
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn print_table() -> Result<(), String> {
    for ty in GgmlType::all() {
        println!(
            "{} {} {} {} {}",
            ty.id(),
            ty.name(),
            ty.block_size(),
            ty.type_size(),
            is_supported(ty)
        );
    }
    Ok(())
}

fn serve() -> Result<(), String> {
    let mut input = io::stdin().lock();
    let mut output = BufWriter::new(io::stdout().lock());
    let mut header = [0u8; 12];
    loop {
        match input.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading a request: {e}")),
        }
        let id = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let count = u64::from_le_bytes(header[4..].try_into().expect("8 bytes"));
        let ty = GgmlType::from_id(id).ok_or_else(|| format!("unknown ggml type id {id}"))?;
        let count = usize::try_from(count).map_err(|_| format!("count {count} too large"))?;
        let bytes = ty
            .row_size(count)
            .ok_or_else(|| format!("{ty}: {count} elements is not a whole number of blocks"))?;
        let mut src = vec![0u8; bytes];
        input
            .read_exact(&mut src)
            .map_err(|e| format!("reading {bytes} bytes of {ty}: {e}"))?;
        let mut dst = vec![0f32; count];
        dequantize_row(ty, &src, &mut dst).map_err(|e| e.to_string())?;
        let out: Vec<u8> = dst.iter().flat_map(|v| v.to_le_bytes()).collect();
        output
            .write_all(&out)
            .and_then(|()| output.flush())
            .map_err(|e| format!("writing the answer: {e}"))?;
    }
}
