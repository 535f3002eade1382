"""``simmodel traces list`` and ``simmodel traces fetch``, and scenarios that name shipped traces, run as a user
runs them. Downloads go to a local HTTP server on 127.0.0.1 or a file:// folder ($SIMMODEL_TRACES_BASE_URL),
never the internet: it serves a copy of the shipped Azure 2023 code trace, whose bytes are the published
file's, so the catalogue's real SHA-256 is the one checked."""

from __future__ import annotations

import functools
import http.server
import io
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from factories import builtin_trace, make_scenario

from simmodel.cli import download_bar
from simmodel.config.catalog import BUILTIN, FETCHABLE
from simmodel.paths import current_umask

ROOT = Path(__file__).resolve().parents[1]
AZURE_CODE = builtin_trace("azure/code_2023.csv")
FILE = "AzureLLMInferenceTrace_code.csv"


def simmodel(*args: str, cwd: Path = ROOT, base_url: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SIMMODEL_TRACES_BASE_URL", None)
    if base_url is not None:
        env["SIMMODEL_TRACES_BASE_URL"] = base_url
    return subprocess.run([sys.executable, "-m", "simmodel.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on 127.0.0.1 (a thread, shut down after the test): (folder, base URL)."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_fetch_downloads_checks_and_prints_the_path(served, tmp_path):
    folder, url = served
    shutil.copy(AZURE_CODE, folder / FILE)
    out = tmp_path / "new" / "traces"
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(out), base_url=url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{out / FILE}\n"
    assert proc.stderr == ""  # off a terminal: no progress bar
    assert (out / FILE).read_bytes() == AZURE_CODE.read_bytes()
    assert [p.name for p in out.iterdir()] == [FILE]  # no temporary file left
    # an ordinary new file's permissions (rw-rw-rw- less the umask), not the temporary file's owner-only ones
    assert (out / FILE).stat().st_mode & 0o777 == 0o666 & ~current_umask()


def test_fetch_from_a_file_url(tmp_path):
    folder = tmp_path / "mirror"
    folder.mkdir()
    shutil.copy(AZURE_CODE, folder / FILE)
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(tmp_path / "out"),
                    base_url=folder.as_uri())
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / FILE).read_bytes() == AZURE_CODE.read_bytes()


@pytest.mark.parametrize("change, message", [
    (lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], "checksum mismatch (sha256 "),  # one bit, same size
    (lambda b: b[:-1], "got 320,116 bytes, not the published 320,117 bytes"),
    (lambda b: b + b"x", "got more than the published 320,117 bytes"),
])
def test_a_file_that_is_not_the_published_one_leaves_nothing(served, tmp_path, change, message):
    folder, url = served
    (folder / FILE).write_bytes(change(AZURE_CODE.read_bytes()))
    out = tmp_path / "out"
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(out), base_url=url)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("simmodel: traces fetch: azure/code_2023.csv: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not out.exists()  # the folder it made for the file goes too: nothing written


def test_network_errors_are_one_line_and_leave_nothing(served, tmp_path):
    _, url = served  # an empty folder: 404
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(tmp_path / "a"), base_url=url)
    assert proc.returncode == 1 and "HTTP 404" in proc.stderr and proc.stderr.count("\n") == 1
    with socket.socket() as sock:  # a port nothing listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(tmp_path / "b"),
                    base_url=f"http://127.0.0.1:{port}")
    assert proc.returncode == 1 and proc.stderr.startswith("simmodel: traces fetch: ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_existing_file_is_replaced_only_with_overwrite_and_a_good_download(served, tmp_path):
    folder, url = served
    out = tmp_path / "out"
    out.mkdir()
    (out / FILE).write_text("mine")
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(out), base_url=url)
    assert proc.returncode == 2 and proc.stderr == f"simmodel: {out / FILE}: exists (use --overwrite to replace it)\n"
    (folder / FILE).write_bytes(b"not the trace")
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(out), "--overwrite", base_url=url)
    assert proc.returncode == 1
    assert (out / FILE).read_text() == "mine" and [p.name for p in out.iterdir()] == [FILE]
    shutil.copy(AZURE_CODE, folder / FILE)
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(out), "--overwrite", base_url=url)
    assert proc.returncode == 0 and (out / FILE).read_bytes() == AZURE_CODE.read_bytes()


def test_bad_names_and_folders_are_one_line_exit_2(tmp_path):
    proc = simmodel("traces", "fetch", "mooncake/toolagent.jsonl", base_url="http://127.0.0.1:9")
    assert proc.returncode == 2
    assert proc.stderr == ("simmodel: traces fetch: unknown trace 'mooncake/toolagent.jsonl' (known: "
                           + ", ".join(FETCHABLE) + ")\n")
    (tmp_path / "f").write_text("a file")
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(tmp_path / "f"),
                    base_url="http://127.0.0.1:9")
    assert proc.returncode == 2 and proc.stderr == f"simmodel: --to {tmp_path / 'f'}: not a folder\n"
    proc = simmodel("traces", "fetch", "azure/code_2023.csv", "--to", str(tmp_path / "g"), base_url="127.0.0.1:9")
    assert proc.returncode == 2 and proc.stderr == ("simmodel: SIMMODEL_TRACES_BASE_URL: '127.0.0.1:9': must be an "
                                                    "http://, https:// or file:// URL\n")
    assert not (tmp_path / "g").exists()


def test_list_has_one_line_per_trace():
    proc = simmodel("traces", "list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 + 3 + 4 == 1 + len(BUILTIN) + len(FETCHABLE)
    row = next(line.split() for line in lines if line.startswith("builtin:mooncake/"))
    assert row[:5] == ["builtin:mooncake/conversation_head2000.jsonl", "514,852", "Apache-2.0",
                       "kvcache-ai/Mooncake@3b5a5941", "FAST25-release/traces/conversation_trace.jsonl"]
    row = next(line.split() for line in lines if line.startswith("azure/conv_2023.csv"))
    assert row == ["azure/conv_2023.csv", "719,188", "CC-BY-4.0", "Azure/AzurePublicDataset@b469a113",
                   "data/AzureLLMInferenceTrace_conv.csv"]


def test_the_progress_bar_is_drawn_on_a_terminal_only():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert download_bar(100, "t", io.StringIO()) is None
    terminal = Terminal()
    bar = download_bar(2048, "t.csv", terminal)
    bar.update(1024)
    bar.refresh()  # tqdm redraws at most every 0.1 s by itself
    bar.close()
    assert "t.csv" in terminal.getvalue() and "50%" in terminal.getvalue()


@pytest.mark.parametrize("name", ["azure-conv-trace", "disagg-llama70b-h200", "mooncake-conversation",
                                  "mooncake-prefix-caching"])
def test_the_trace_scenarios_validate_from_any_folder(name, tmp_path):
    proc = simmodel("validate", "-c", str(ROOT / "scenarios" / f"{name}.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_an_unknown_builtin_trace_is_one_line_exit_2(tmp_path):
    data = make_scenario(traffic={"source": {"type": "trace", "path": "builtin:mooncake/chat.jsonl",
                                             "format": "mooncake"}, "load": {"type": "trace_timestamps"}})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    proc = simmodel("validate", "-c", str(tmp_path / "s.yaml"))
    assert proc.returncode == 2
    assert proc.stderr == ("simmodel: s.yaml: traffic.source.path: builtin:mooncake/chat.jsonl: no such built-in trace "
                           "(known: builtin:azure/code_2023.csv, builtin:azure/conv_2023.csv, "
                           "builtin:mooncake/conversation_head2000.jsonl)\n")
