//! The hard limits a chat template renders under. A template comes from the model file, so it
//! is untrusted code: each limit turns a hostile or broken template into a one-line error that
//! names the limit, quickly and without growing the caller's memory.

use minijinja::{Error, ErrorKind, Value};
use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

/// Instructions one render may execute (minijinja's fuel). Real chat templates spend a few
/// dozen per message (SmolLM2's: a 5000-message conversation renders well within it), yet a
/// runaway loop stops within a fraction of a second.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// Nesting depth of macro calls, includes and loops (minijinja's recursion limit; a macro
/// call counts several levels). Real templates nest a handful deep; this stops self-recursive
/// macros long before the stack is at risk.
pub const TEMPLATE_RECURSION_LIMIT: usize = 100;

/// Elements a `range()` may produce (Jinja's sandbox uses the same bound). Loops over other
/// sequences are bounded by [`TEMPLATE_FUEL`].
pub const TEMPLATE_LOOP_LIMIT: usize = 100_000;

/// Bytes of rendered text allowed regardless of the input: a prompt is the conversation plus
/// the template's markup, so this is generous.
pub const TEMPLATE_OUTPUT_BASE: usize = 1 << 20;

/// Further bytes of rendered text allowed per byte of input (messages, BOS/EOS texts).
pub const TEMPLATE_OUTPUT_PER_INPUT_BYTE: usize = 2;

/// Memory a render may allocate beyond what the process had, regardless of the input. On
/// Linux the render runs in a forked child under this address-space limit, since string
/// concatenation (`s ~ s`, doubled forty times) grows values that no instruction count bounds.
pub const TEMPLATE_MEMORY_BASE: usize = 128 << 20;

/// Further memory a render may allocate per byte of input.
pub const TEMPLATE_MEMORY_PER_INPUT_BYTE: usize = 16;

/// Wall time one render may take (the backstop behind [`TEMPLATE_FUEL`], e.g. for a filter
/// that is slow on a large value).
pub const TEMPLATE_TIME_LIMIT: Duration = Duration::from_secs(2);

/// The limits of one render, sized by its input.
#[derive(Clone, Copy, Debug)]
pub struct RenderLimits {
    /// Bytes of output allowed.
    pub output_bytes: usize,
    /// Bytes of memory allowed beyond the process's size at the start.
    pub memory_bytes: usize,
}

impl RenderLimits {
    /// The limits for a render whose messages and BOS/EOS texts total `input_bytes`.
    pub fn for_input(input_bytes: usize) -> RenderLimits {
        RenderLimits {
            output_bytes: TEMPLATE_OUTPUT_BASE
                .saturating_add(input_bytes.saturating_mul(TEMPLATE_OUTPUT_PER_INPUT_BYTE)),
            memory_bytes: TEMPLATE_MEMORY_BASE
                .saturating_add(input_bytes.saturating_mul(TEMPLATE_MEMORY_PER_INPUT_BYTE)),
        }
    }

    /// The message of the output limit.
    pub fn output_message(&self) -> String {
        format!(
            "the output limit ({} bytes: TEMPLATE_OUTPUT_BASE + TEMPLATE_OUTPUT_PER_INPUT_BYTE per input byte)",
            self.output_bytes
        )
    }

    /// The message of the memory limit.
    pub fn memory_message(&self) -> String {
        format!(
            "the memory limit ({} MiB: TEMPLATE_MEMORY_BASE + TEMPLATE_MEMORY_PER_INPUT_BYTE per input byte)",
            self.memory_bytes >> 20
        )
    }
}

/// The rendered text, refusing to grow past a limit: the render fails at the first write
/// that would cross it, so the text never exceeds it.
pub struct BoundedOutput {
    /// The text so far.
    pub buf: Vec<u8>,
    limit: usize,
    /// Set when a write was refused (shared with the caller, which reads it after the render).
    pub exceeded: Rc<Cell<bool>>,
}

impl BoundedOutput {
    /// An empty output of at most `limit` bytes.
    pub fn new(limit: usize) -> BoundedOutput {
        BoundedOutput {
            buf: Vec::new(),
            limit,
            exceeded: Rc::new(Cell::new(false)),
        }
    }
}

impl io::Write for BoundedOutput {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.exceeded.set(true);
            return Err(io::Error::other("chat template output limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Jinja's `range([start,] stop[, step])`, refusing more than [`TEMPLATE_LOOP_LIMIT`] elements.
pub fn bounded_range(lower: i64, upper: Option<i64>, step: Option<i64>) -> Result<Value, Error> {
    let (start, stop) = match upper {
        Some(u) => (lower, u),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "range() step must not be zero",
        ));
    }
    let span = if step > 0 {
        (stop as i128 - start as i128).max(0)
    } else {
        (start as i128 - stop as i128).max(0)
    };
    let step_abs = (step as i128).abs();
    let len = (span + step_abs - 1) / step_abs;
    if len > TEMPLATE_LOOP_LIMIT as i128 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{LOOP_LIMIT_MARK}: range() of {len} elements is over TEMPLATE_LOOP_LIMIT = {TEMPLATE_LOOP_LIMIT}"),
        ));
    }
    let items: Vec<i64> = (0..len as i64).map(|i| start + i * step).collect();
    Ok(Value::from(items))
}

/// How a loop-limit error is recognised in minijinja's error.
pub const LOOP_LIMIT_MARK: &str = "the loop limit";

/// The limit a minijinja error reports, as "the ... limit (...)", if it is one of ours.
pub fn exceeded_limit(e: &Error) -> Option<String> {
    if e.kind() == ErrorKind::OutOfFuel {
        return Some(format!(
            "the instruction budget (TEMPLATE_FUEL = {TEMPLATE_FUEL} instructions)"
        ));
    }
    let detail = e.detail().unwrap_or("");
    if e.kind() == ErrorKind::InvalidOperation && detail == "recursion limit exceeded" {
        return Some(format!(
            "the recursion limit (TEMPLATE_RECURSION_LIMIT = {TEMPLATE_RECURSION_LIMIT})"
        ));
    }
    detail
        .strip_prefix(LOOP_LIMIT_MARK)
        .map(|rest| format!("{LOOP_LIMIT_MARK}{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(v: Value) -> Vec<i64> {
        v.try_iter()
            .unwrap()
            .map(|x| i64::try_from(x).unwrap())
            .collect()
    }

    #[test]
    fn range_matches_python() {
        assert_eq!(items(bounded_range(3, None, None).unwrap()), [0, 1, 2]);
        assert_eq!(items(bounded_range(1, Some(7), Some(3)).unwrap()), [1, 4]);
        assert_eq!(
            items(bounded_range(5, Some(0), Some(-2)).unwrap()),
            [5, 3, 1]
        );
        assert!(items(bounded_range(5, Some(0), None).unwrap()).is_empty());
        assert!(bounded_range(0, Some(1), Some(0)).is_err());
    }

    #[test]
    fn range_over_the_limit_names_it() {
        let n = TEMPLATE_LOOP_LIMIT as i64;
        assert_eq!(
            items(bounded_range(n, None, None).unwrap()).len(),
            n as usize
        );
        let e = bounded_range(i64::MIN, Some(i64::MAX), None).unwrap_err();
        let limit = exceeded_limit(&e).unwrap();
        assert!(limit.contains("TEMPLATE_LOOP_LIMIT"), "{limit}");
    }

    #[test]
    fn output_stops_at_its_limit() {
        use std::io::Write;
        let mut out = BoundedOutput::new(4);
        out.write_all(b"abc").unwrap();
        assert!(out.write_all(b"de").is_err());
        assert!(out.exceeded.get());
        assert_eq!(out.buf, b"abc");
    }
}
