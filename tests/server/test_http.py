"""``serve --http``: the guard (token, Host, size), the token file, loopback-only binding,
graceful shutdown, several clients at once, and a client killed mid-request."""

from __future__ import annotations

import gzip
import http.client
import json
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from contextstore import ContextStore
from tests.server.conftest import (
    WAIT_SECONDS,
    HttpClient,
    HttpServer,
    ServerProcess,
    server_env,
    start_http,
)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """One server for the tests that only look at single requests."""
    root = tmp_path_factory.mktemp("guard")
    server = start_http(root / "a.db", root / "data")
    try:
        yield server
    finally:
        server.process.stop()


LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "list_conversations"})


def _append_body(cid: str, text: str) -> bytes:
    params = {"conversation_id": cid, "role": "user", "content": text}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "append", "params": params}).encode()


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-token-0123456789",
        "Basic dXNlcjpwYXNz",
        "Basic {token}",
        "{token}",
        "Bearer{token}",
        "Bearer {token}x",
    ],
)
def test_a_request_without_the_token_is_401_and_changes_nothing(
    shared_server: HttpServer, authorization: str | None
) -> None:
    client = shared_server.client()
    cid = client.result("create_conversation")["id"]
    headers = {"Authorization": authorization.format(token=client.token) if authorization else ""}
    response = client.post(_append_body(cid, "sneaky"), headers=headers)
    assert response.status == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.result("messages", conversation_id=cid) == []


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer "])
def test_the_scheme_name_is_case_insensitive(shared_server: HttpServer, scheme: str) -> None:
    """RFC 9110 section 11.1: the authentication scheme is a case-insensitive token."""
    client = shared_server.client()
    response = client.post(LIST, headers={"Authorization": f"{scheme} {client.token}"})
    assert response.status == 200, response


@pytest.mark.parametrize("order", ["wrong first", "right first"])
def test_two_authorization_headers_are_401(shared_server: HttpServer, order: str) -> None:
    client = shared_server.client()
    cid = client.result("create_conversation")["id"]
    values = [f"Bearer {client.token}", "Bearer wrong-token-0123456789"]
    if order == "wrong first":
        values.reverse()
    connection = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=WAIT_SECONDS)
    try:
        connection.putrequest("POST", "/rpc")
        for value in values:
            connection.putheader("Authorization", value)
        body = _append_body(cid, "sneaky")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        assert connection.getresponse().status == 401
    finally:
        connection.close()
    assert client.result("messages", conversation_id=cid) == []


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example:{port}", 421),  # a rebound domain pointing at 127.0.0.1
        ("evil.example", 421),
        ("127.0.0.1:{other}", 421),
        ("127.0.0.1:abc", 421),
        ("127.0.0.1:{port}x", 421),
        ("[127.0.0.1]junk", 421),
        ("127.0.0.1:{port}", 200),
        ("localhost:{port}", 200),
        ("LOCALHOST:{port}", 200),
    ],
)
def test_the_host_header_must_name_the_bound_address(
    shared_server: HttpServer, host: str, status: int
) -> None:
    value = host.format(port=shared_server.port, other=shared_server.port + 1)
    response = shared_server.client().post(LIST, headers={"Host": value})
    assert response.status == status, response


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("[::1]:8765", ("::1", 8765)),
        ("[::1]", ("::1", None)),
        ("LocalHost", ("localhost", None)),
        ("::1", ("::1", None)),
        ("", ("", None)),
        ("evil.example:x", ("evil.example", -1)),
        ("127.0.0.1:", ("127.0.0.1", None)),
        ("127.0.0.1:\u0661\u0662", ("127.0.0.1", -1)),  # Arabic-Indic digits are not a port
        ("[::1]8765", ("::1", -1)),
    ],
)
def test_host_headers_are_split_into_name_and_port(
    value: str, parsed: tuple[str, int | None]
) -> None:
    from contextstore.server.http import split_host_header

    assert split_host_header(value) == parsed


@pytest.mark.parametrize(
    ("bound", "extra", "allowed"),
    [
        ("127.0.0.1", (), {"127.0.0.1", "localhost"}),
        ("localhost", (), {"127.0.0.1", "localhost"}),
        ("::1", (), {"::1", "localhost"}),
        (
            "0.0.0.0",
            ("agents.internal",),
            {"0.0.0.0", "127.0.0.1", "::1", "localhost", "agents.internal"},
        ),
        ("192.0.2.7", ("Box.Example",), {"192.0.2.7", "box.example"}),
    ],
)
def test_the_accepted_host_names(bound: str, extra: tuple[str, ...], allowed: set[str]) -> None:
    from contextstore.server.http import allowed_host_names

    assert allowed_host_names(bound, extra) == allowed


def test_health_and_methods(shared_server: HttpServer) -> None:
    client = shared_server.client()
    connection = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=WAIT_SECONDS)
    connection.request("GET", "/health", headers={"Authorization": f"Bearer {client.token}"})
    assert connection.getresponse().status == 200
    connection.close()
    notification = b'{"jsonrpc":"2.0","method":"list_conversations"}'
    assert client.post(notification).status == 204
    assert client.post(LIST, path="/elsewhere").status == 404


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/rpc", 405), ("PUT", "/rpc", 405), ("POST", "/health", 405), ("GET", "/", 404)],
)
def test_another_path_or_method_is_told_what_to_send_in_json(
    shared_server: HttpServer, method: str, path: str, status: int
) -> None:
    """Like 401, 413 and 421: a JSON body a client's response.json() can read."""
    connection = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=WAIT_SECONDS)
    try:
        connection.request(
            method, path, body=LIST, headers={"Authorization": f"Bearer {shared_server.token}"}
        )
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == status
    assert response.getheader("content-type") == "application/json"
    assert list(body) == ["error"]
    assert body["error"].startswith(f"{method} {path} is not served; send JSON-RPC with POST /rpc")
    if status == 405:
        allowed = {m.strip() for m in (response.getheader("allow") or "").split(",")}
        assert allowed == ({"POST"} if path == "/rpc" else {"GET", "HEAD"})


@pytest.mark.parametrize(
    ("method", "path", "meant"),
    [("POST", "/rpc/", "/rpc"), ("POST", "/rpc//", "/rpc"), ("GET", "/health/", "/health")],
)
def test_a_trailing_slash_is_a_json_404_naming_the_path_not_a_redirect(
    shared_server: HttpServer, method: str, path: str, meant: str
) -> None:
    """httpx, told to follow redirects as many clients do, gets one answer: a redirect
    (Starlette's default) would be re-sent by some clients as a GET, without the body or
    without the token, and by others not at all."""
    httpx = pytest.importorskip("httpx")
    before = shared_server.client().result("list_conversations")
    create = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "create_conversation"})
    with httpx.Client(follow_redirects=True, timeout=WAIT_SECONDS) as client:
        response = client.request(
            method,
            f"http://127.0.0.1:{shared_server.port}{path}",
            content=create if method == "POST" else None,
            headers={"Authorization": f"Bearer {shared_server.token}"},
        )
    assert response.history == [] and response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": f"{method} {path} is not served: the path is {meant}, without the trailing "
        "slash; send JSON-RPC with POST /rpc (GET /health answers whether the server is up)"
    }
    assert shared_server.client().result("list_conversations") == before  # nothing ran


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "application/json"]
)
def test_the_body_is_read_as_json_whatever_its_content_type(
    shared_server: HttpServer, content_type: str | None
) -> None:
    """As the README says: curl's -d sends a form type, fetch() a text one by default; the
    token, not the type, is what keeps a web page out."""
    headers = {"Content-Type": content_type} if content_type else {}
    connection = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=60)
    try:
        connection.putrequest("POST", "/rpc", skip_accept_encoding=True)
        connection.putheader("Authorization", f"Bearer {shared_server.token}")
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(LIST)))
        connection.endheaders(LIST.encode())
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 200 and isinstance(body["result"], list)


@pytest.mark.parametrize("coding", ["gzip", "br", "GZIP"])
def test_a_compressed_body_is_415_naming_its_encoding(
    shared_server: HttpServer, coding: str
) -> None:
    """It was read as text and answered "not UTF-8 (the byte 0x8b at offset 1)"."""
    before = shared_server.client().result("list_conversations")
    create = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "create_conversation"})
    connection = http.client.HTTPConnection("127.0.0.1", shared_server.port, timeout=60)
    try:
        connection.request(
            "POST",
            "/rpc",
            body=gzip.compress(create.encode()),
            headers={
                "Authorization": f"Bearer {shared_server.token}",
                "Content-Encoding": coding,
            },
        )
        response = connection.getresponse()
        body = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 415
    assert body == {
        "error": f"the body is sent with Content-Encoding: {coding.lower()}, which the server "
        "does not decode; send the JSON uncompressed"
    }
    assert shared_server.client().result("list_conversations") == before


def test_the_request_size_is_capped_at_the_byte(tmp_path: Path) -> None:
    server = start_http(tmp_path / "a.db", tmp_path / "data", "--max-request-bytes", "2048")
    try:
        client = server.client()
        cid = client.result("create_conversation")["id"]
        overhead = len(_append_body(cid, ""))
        fits = _append_body(cid, "x" * (2048 - overhead))
        assert len(fits) == 2048
        assert client.post(fits).status == 200
        over = _append_body(cid, "y" * (2049 - overhead))
        assert client.post(over).status == 413
        chunked = client.post(iter([over[:1000], over[1000:]]), headers={})
        assert chunked.status == 413
        assert [m["content"][0] for m in client.result("messages", conversation_id=cid)] == ["x"]
    finally:
        server.process.stop()


def _asgi_post(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """``POST /rpc`` through the ASGI app itself, with the headers' bytes exactly as given
    (uvicorn's parser refuses a Content-Length that is not ASCII digits before the app sees
    it; an ASGI server that lets it through hands it over decoded as Latin-1)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/rpc",
        "raw_path": b"/rpc",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    sent: list[dict[str, Any]] = []
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        await app(scope, receive, send)

    anyio.run(run)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize(
    "declared", ["\u00b2", "\u00b9\u00b2\u00b3", "1\u00b2", "\u00be", "-5", " 9"]
)
def test_a_declared_size_of_digits_that_are_not_ascii_is_no_internal_error(
    declared: str,
) -> None:
    # "²".isdigit() is True and int("²") raises: the request ended in a 500 and a
    # traceback. The declared size is only a hint; the body read is what is capped.
    status, answer = _post_declaring(declared, LIST.encode())
    assert (status, json.loads(answer)["result"]) == (200, [])
    status, answer = _post_declaring(declared, LIST.encode() + b" ")
    assert status == 413 and b"over" in answer


@pytest.mark.parametrize(
    ("declared", "status"), [("0" * 5000 + "55", 200), ("9" * 5000, 413), ("60", 413)]
)
def test_a_declared_size_is_read_whatever_its_length(declared: str, status: int) -> None:
    # int() refuses a number of over 4,300 digits: that was a 500 too.
    assert _post_declaring(declared, LIST.encode())[0] == status


def _post_declaring(declared: str, body: bytes) -> tuple[int, bytes]:
    """POST ``body`` with ``declared`` as its Content-Length, the exact bytes, to an app
    whose body limit is the size of ``LIST``'s request."""
    from contextstore.server.http import create_app
    from contextstore.server.jsonrpc import Dispatcher

    token = "t" * 43
    with ContextStore.open(":memory:") as store:
        app = create_app(
            Dispatcher(store),
            token=token,
            hosts=frozenset({"127.0.0.1"}),
            port=8080,
            max_request_bytes=len(LIST),
        )
        headers = [
            (b"host", b"127.0.0.1:8080"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", declared.encode("latin-1")),
        ]
        return _asgi_post(app, body, headers)


def test_the_generated_token_is_private_reused_and_its_path_printed(tmp_path: Path) -> None:
    first = start_http(tmp_path / "a.db", tmp_path / "data")
    first.process.stop()
    assert first.token_path == tmp_path / "data" / "contextstore" / "server-token"
    assert stat.S_IMODE(first.token_path.stat().st_mode) == 0o600
    assert len(first.token) >= 32
    second = start_http(tmp_path / "a.db", tmp_path / "data")
    try:
        assert second.token == first.token
        assert second.client().result("list_conversations") == []
    finally:
        second.process.stop()


def test_a_token_file_given_is_used(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-of-my-own-0123456789\n")
    token_file.chmod(0o600)
    server = start_http(tmp_path / "a.db", tmp_path / "data", "--token-file", str(token_file))
    try:
        assert server.token == "a-token-of-my-own-0123456789"
        assert server.client().result("list_conversations") == []
        assert not (tmp_path / "data" / "contextstore" / "server-token").exists()
    finally:
        server.process.stop()


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextstore", "--db", str(tmp_path / "a.db"), *args],
        capture_output=True,
        text=True,
        env=server_env(tmp_path / "data"),
        timeout=WAIT_SECONDS,
        check=False,
    )


def test_a_token_file_that_cannot_be_made_or_read_is_one_line(tmp_path: Path) -> None:
    """The data directory cannot hold the generated token (a file where it should be), the
    token path is a folder, a token file is not text: each was an internal error with a
    traceback (or named --token-file, which was not given)."""
    data = tmp_path / "data"
    data.write_text("a file where the data directory should be")
    done = _cli(tmp_path, "serve", "--http", "127.0.0.1:0")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"error: cannot create the server's token file {data / 'contextstore' / 'server-token'}: "
    )
    assert "or pass --token-file FILE" in done.stderr and "internal error" not in done.stderr

    data.unlink()
    (data / "contextstore" / "server-token").mkdir(parents=True)
    done = _cli(tmp_path, "serve", "--http", "127.0.0.1:0")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is not a regular file" in done.stderr and "--token-file FILE" in done.stderr

    binary = tmp_path / "binary-token"
    binary.write_bytes(b"\xff\xfe" + b"\x00" * 40)
    binary.chmod(0o600)
    done = _cli(tmp_path, "serve", "--http", "127.0.0.1:0", "--token-file", str(binary))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr == (
        f"error: the token file {binary} is not UTF-8 text; put a long random string in it "
        "(for example from 'openssl rand -hex 32').\n"
    )


def test_a_data_directory_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """No token file yet, in a directory the server may not write: exit 9 (a read-only
    location) and what to do, not an internal error."""
    import os
    import shutil

    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root writes anywhere, and setpriv is missing to drop that power")
    data = tmp_path / "data"
    data.mkdir(mode=0o555)
    data.chmod(0o555)
    dropped = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override"]
    serve = ["--db", str(tmp_path / "a.db"), "serve", "--http", "127.0.0.1:0"]
    done = subprocess.run(
        [*(dropped if os.geteuid() == 0 else []), sys.executable, "-m", "contextstore", *serve],
        capture_output=True,
        text=True,
        env=server_env(data),
        timeout=WAIT_SECONDS,
        check=False,
    )
    assert done.returncode == 9 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"error: cannot create the server's token file {data / 'contextstore' / 'server-token'}: "
        "Permission denied; make "
    )
    assert "or pass --token-file FILE" in done.stderr
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http", "192.0.2.1:0"], "not a loopback address"),
        (["--http", "127.0.0.1"], "--http takes HOST:PORT"),
        (["--http", "127.0.0.1:abc"], "--http takes HOST:PORT"),  # was an internal error
        (["--http", "127.0.0.1:-1"], "--http takes HOST:PORT"),
        (["--http", "example.com:80"], "an IP address or localhost"),
        (["--http", "127.0.0.1:0", "--token-file", "missing"], "does not exist"),
        (["--http", "127.0.0.1:0", "--token-file", "{readable}"], "chmod 600"),
        (["--http", "127.0.0.1:0", "--token-file", "{short}"], "at least 16 characters"),
    ],
)
def test_refusals_are_one_line_with_exit_code_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    readable = tmp_path / "readable"
    readable.write_text("a-long-enough-token-0123456789")
    readable.chmod(0o644)
    short = tmp_path / "short"
    short.write_text("short")
    short.chmod(0o600)
    args = [a.format(readable=readable, short=short) for a in args]
    done = _cli(tmp_path, "serve", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_readable_token_file_is_refused_with_a_remedy_that_works_for_it(
    tmp_path: Path,
) -> None:
    """Removing the data directory's token file has a new one generated at the next start;
    removing a --token-file does not (the next start refuses it as missing), so only the
    former is offered (the message offered both the same way)."""
    given = tmp_path / "token"
    given.write_text("a-long-enough-token-0123456789")
    given.chmod(0o644)
    done = _cli(tmp_path, "serve", "--http", "127.0.0.1:0", "--token-file", str(given))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"error: the token file {given} can be read by other users (mode 0644); "
        f"run 'chmod 600 {given}'.\n"
    )

    default = tmp_path / "data" / "contextstore" / "server-token"
    default.parent.mkdir(parents=True)
    default.write_text("a-long-enough-token-0123456789")
    default.chmod(0o644)
    done = _cli(tmp_path, "serve", "--http", "127.0.0.1:0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.endswith(
        f"run 'chmod 600 {default}' or remove it to have a new one generated.\n"
    )


def test_allow_remote_binds_every_interface_and_accepts_the_names_given(tmp_path: Path) -> None:
    process = ServerProcess(
        [
            "--db",
            str(tmp_path / "a.db"),
            "serve",
            "--http",
            "0.0.0.0:0",
            "--allow-remote",
            "--allow-host",
            "agents.internal",
        ],
        tmp_path / "data",
    )
    try:
        port = int(process.wait_for(r"serving JSON-RPC at http://0\.0\.0\.0:(\d+)/rpc").group(1))
        token_path = Path(process.wait_for(r"bearer token in (.+)$").group(1))
        client = HttpClient(port, token_path.read_text().strip())
        for host, status in (("agents.internal", 200), ("127.0.0.1", 200), ("other.host", 421)):
            response = client.post(LIST, headers={"Host": f"{host}:{port}"})
            assert response.status == status, host
    finally:
        process.stop()


def test_sigterm_finishes_the_request_in_flight(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    server = start_http(db, tmp_path / "data", "--log-level", "debug")
    client = server.client()
    cid = client.result("create_conversation")["id"]
    answers: list[Any] = []
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # holds the write lock: the append below must wait
    start = len(server.process.lines)
    caller = threading.Thread(
        target=lambda: answers.append(client.result("append", **_params(cid, "in flight")))
    )
    caller.start()
    try:
        server.process.wait_for(r"calling append", start)
        server.process.process.send_signal(signal.SIGTERM)
        server.process.wait_for(r"Shutting down", start)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    caller.join(WAIT_SECONDS)
    assert answers and answers[0]["index"] == 0
    assert server.process.process.wait(WAIT_SECONDS) == 0
    with ContextStore.open(db) as store:
        assert [m["content"] for m in store.messages(cid)] == ["in flight"]


def _params(cid: str, text: str) -> dict[str, Any]:
    return {"conversation_id": cid, "role": "user", "content": text}


def test_six_clients_at_once_keep_indices_contiguous_and_order(
    db_location: str, tmp_path: Path
) -> None:
    http_server = start_http(db_location, tmp_path / "data")
    try:
        _six_clients(http_server)
    finally:
        http_server.process.stop()


def _six_clients(http_server: HttpServer) -> None:
    per_client = 25
    setup = http_server.client()
    own = [setup.result("create_conversation")["id"] for _ in range(4)]
    shared = setup.result("create_conversation")["id"]
    plan = [(f"own{i}", cid) for i, cid in enumerate(own)] + [("s0", shared), ("s1", shared)]
    barrier = threading.Barrier(len(plan))
    acknowledged: dict[str, list[tuple[int, str]]] = {name: [] for name, _ in plan}
    failures: list[BaseException] = []

    def run(name: str, cid: str) -> None:
        client = HttpClient(http_server.port, http_server.token)
        try:
            barrier.wait(WAIT_SECONDS)
            for seq in range(per_client):
                text = f"{name}:{seq}"
                written = client.result("append", **_params(cid, text))
                acknowledged[name].append((written["index"], text))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=step) for step in plan]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS)
    assert not failures, failures
    with ContextStore.open(http_server.db) as store:
        for name, cid in plan:
            stored = [m["content"] for m in store.messages(cid)]
            expected_count = per_client * (2 if cid == shared else 1)
            assert len(stored) == expected_count
            for index, text in acknowledged[name]:
                assert stored[index] == text  # the index each client was told is its message
            mine = [t for t in stored if t.startswith(f"{name}:")]
            assert mine == [f"{name}:{seq}" for seq in range(per_client)]  # order kept
            store.check(cid)


KILLED_CLIENT = r"""
import http.client, json, socket, sys
port, token, cid, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def body(seq):
    params = {"conversation_id": cid, "role": "user", "content": f"m{seq}"}
    return json.dumps({"jsonrpc": "2.0", "id": seq, "method": "append", "params": params}).encode()
headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
for seq in range(5):
    connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request("POST", "/rpc", body=body(seq), headers=headers)
    answer = json.loads(connection.getresponse().read())
    print("ack", seq, answer["result"]["index"], flush=True)
    connection.close()
raw = socket.create_connection(("127.0.0.1", port))
data = body(5)
head = (f"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
raw.sendall(head + (data[: len(data) // 2] if mode == "partial" else data))
print("sent", flush=True)
raw.recv(1)
"""


@pytest.mark.parametrize("mode", ["partial", "whole"])
def test_a_client_killed_mid_request_loses_nothing_acknowledged(
    http_server: HttpServer, mode: str
) -> None:
    client = http_server.client()
    cid = client.result("create_conversation")["id"]
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, str(http_server.port), client.token, cid, mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged = {}
    assert child.stdout is not None
    for line in child.stdout:
        words = line.split()
        if words[0] == "sent":
            break
        acknowledged[int(words[2])] = f"m{words[1]}"
    child.send_signal(signal.SIGKILL)
    child.wait(WAIT_SECONDS)
    child.stdout.close()
    assert len(acknowledged) == 5
    # The server still answers, and the conversation holds every acknowledged message.
    stored = [m["content"] for m in client.result("messages", conversation_id=cid)]
    assert {i: stored[i] for i in acknowledged} == acknowledged
    assert stored[:5] == [f"m{i}" for i in range(5)]
    if mode == "partial":  # half a body is never a message
        http_server.process.wait_for("disconnected before its request was complete")
        assert "Traceback" not in http_server.process.stderr()
        assert len(stored) == 5
    else:  # a whole request may have landed before the kill; nothing else did
        assert stored[5:] in ([], ["m5"])
    assert client.result("check", conversation_id=cid)["problems"] == []


@pytest.mark.parametrize(("platform", "reused"), [("linux", 1), ("darwin", 1), ("win32", 0)])
def test_the_port_is_shared_with_no_other_program_on_windows(
    platform: str, reused: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Windows SO_REUSEADDR lets a socket bind a port another program listens on (the
    server could take another's port, or have its own taken): it is set on POSIX only."""
    from contextstore.server import http as server_http

    monkeypatch.setattr(server_http.sys, "platform", platform)
    sock = server_http.bind("127.0.0.1", 0, allow_remote=False)
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == reused
    finally:
        sock.close()
