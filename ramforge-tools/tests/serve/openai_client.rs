//! The real `openai` python package (pinned, installed by this test into a venv beside the
//! models, with `jsonschema`) against a running server: `openai_client.py` beside this file
//! does the talking on the default model, `openai_agent.py` on Qwen2.5-Coder-0.5B-Instruct,
//! whose own chat template renders tools.

use super::server::Server;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// The pinned client version.
const OPENAI: &str = "openai==2.15.0";
/// The pinned validator the agent checks use.
const JSONSCHEMA: &str = "jsonschema==4.25.1";

/// Held while the venv is checked or made: this binary's tests run on parallel threads, and two
/// `python3 -m venv` into one folder at once fail (ensurepip of one sees the other's half-made venv).
static VENV: Mutex<()> = Mutex::new(());

/// `$RAMFORGE_MODELS/.venv-openai/bin/python` with the pinned `openai`, made if missing.
/// No python3, venv or pip fails the test: it is not skipped.
fn openai_python() -> PathBuf {
    // A test that panicked holding the lock left no venv worse than a killed run does.
    let _made = VENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let models = super::common::models_dir();
    let venv = models.join(".venv-openai");
    let python = venv.join("bin/python");
    let has = |p: &PathBuf| {
        Command::new(p)
            .args([
                "-c",
                &format!(
                    "import openai, jsonschema, sys; sys.exit(openai.__version__ != '{}')",
                    &OPENAI[8..]
                ),
            ])
            .status()
            .is_ok_and(|s| s.success())
    };
    if has(&python) {
        return python;
    }
    let made = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "python3 -m venv {} failed: install python3 with venv",
        venv.display()
    );
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            OPENAI,
            JSONSCHEMA,
        ])
        .status();
    assert!(
        pip.is_ok_and(|s| s.success()),
        "pip install {OPENAI} {JSONSCHEMA} into {} failed",
        venv.display()
    );
    assert!(
        has(&python),
        "{OPENAI} or {JSONSCHEMA} is not importable after installing it"
    );
    python
}

#[test]
fn the_openai_python_client_works_against_the_server() {
    let python = openai_python();
    // Four requests decoded together: the script's 8 concurrent requests are batched.
    let server = Server::start(&["--api-key", "test-key", "--ctx", "1024", "--parallel", "4"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/serve/openai_client.py");
    let out = Command::new(python)
        .arg(script)
        .arg(server.url("/v1"))
        .arg("test-key")
        .output()
        .expect("run openai_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openai_client.py failed");
    assert!(
        stdout.contains("all openai client checks passed"),
        "{stdout}"
    );
    let (status, health) = server.get("/health", None);
    assert_eq!(status, 200);
    let busiest = health["busiest_step"].as_u64().unwrap();
    assert!(busiest > 1, "nothing was decoded together: {health}");
}

/// An agent's requests on a model whose template renders tools: a required tool call whose
/// arguments validate against the schema, the same call streamed, the tool's result fed back
/// and used, `json_schema` under sampling and `json_object`, logprobs, penalties.
#[test]
fn an_agent_with_the_openai_client_on_qwen_coder_0_5b() {
    let python = openai_python();
    let model = super::common::model_path("qwen25-coder-0.5b.gguf");
    let server = Server::start_model(&model, &["--ctx", "2048"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/serve/openai_agent.py");
    let out = Command::new(python)
        .arg(script)
        .arg(server.url("/v1"))
        .output()
        .expect("run openai_agent.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "openai_agent.py failed");
    assert!(stdout.contains("all agent checks passed"), "{stdout}");
}
