"""A user's path through the command line on a Python that lacks what Windows lacks.

There is no Windows machine here, so this is a simulation: each command runs in a child
Python whose ``sitecustomize`` (a folder put first on ``PYTHONPATH``, inherited by the
processes the command starts) takes away, before anything imports contextstore, what the
Python documentation marks as unavailable on Windows: the POSIX-only signals
(``signal.SIGPIPE``, ``SIGKILL``, ``SIGHUP``, ``SIGALRM``...), ``select.poll`` and
``epoll``, ``os.fork`` and ``os.register_at_fork``, ``os.fdatasync`` (absent on macOS
too), the POSIX-only ``os.O_*`` flags, and the modules ``fcntl``, ``termios``, ``tty``,
``pty``, ``resource``, ``pwd``, ``grp`` and ``syslog``. Text files: ``open()`` without an
encoding reads the locale's on Windows (cp1252), so the child runs in the C locale without
UTF-8 mode (ASCII: stricter still) and any such call (an ``EncodingWarning``) is an error;
its standard streams are cp1252, as Windows gives a redirected one.

What it cannot show: path syntax (``C:\\``, backslashes), Windows' file locking (a file
open elsewhere cannot be replaced or deleted), its console. The whole suite runs on Linux.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import POSTGRES_URL, new_postgres_schema
from tests.interop.real import CLINE, GEMINI, cline_tasks_with_history, gemini_files

ROOT = Path(__file__).resolve().parents[2]

SHIM = textwrap.dedent(
    '''
    """Take away what Python on Windows does not have (see tests/robustness/test_platforms.py)."""
    import importlib.abc
    import os
    import select
    import signal
    import subprocess
    import sys
    import warnings

    # Windows' signal module has SIGABRT, SIGFPE, SIGILL, SIGINT, SIGSEGV, SIGTERM, SIGBREAK.
    for name in list(vars(signal)):
        if name.startswith("SIG") and not name.startswith(("SIG_", "SIGABRT", "SIGFPE")):
            if name not in ("SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "SIGBREAK"):
                delattr(signal, name)
    for name in ("alarm", "pause", "setitimer", "getitimer", "siginterrupt", "pthread_kill",
                 "sigpending", "sigwait", "sigwaitinfo", "sigtimedwait"):
        if hasattr(signal, name):
            delattr(signal, name)

    # select.select is all Windows has (on sockets).
    for name in ("poll", "epoll", "devpoll", "kqueue", "kevent"):
        if hasattr(select, name):
            delattr(select, name)

    for name in ("fork", "forkpty", "register_at_fork", "fdatasync",
                 "O_CLOEXEC", "O_NOFOLLOW", "O_DIRECTORY",
                 "O_NOCTTY", "O_DSYNC", "O_SYNC", "O_PATH", "O_TMPFILE", "O_NOATIME",
                 "getuid", "geteuid", "getgid", "getegid", "getpgid", "setsid", "killpg",
                 "sync", "statvfs", "fstatvfs", "getloadavg", "uname", "mkfifo"):
        if hasattr(os, name):
            delattr(os, name)

    # Popen.kill() needs no SIGKILL on Windows (it is TerminateProcess): here it must
    # still end the child, with POSIX's number for it.
    subprocess.Popen.kill = lambda self: self.send_signal(9)

    MISSING = {"fcntl", "termios", "tty", "pty", "resource", "pwd", "grp", "syslog"}

    class NotOnWindows(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname in MISSING:
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None

    for name in MISSING:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, NotOnWindows())

    warnings.filterwarnings("error", category=EncodingWarning)
    '''
)


@pytest.fixture
def windowsish(tmp_path: Path) -> dict[str, str]:
    """The environment of a child Python with the shim, a database of its own and no
    UTF-8 anywhere but where contextstore asks for it."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM, encoding="utf-8")
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(shim), str(ROOT)]),
        CONTEXTSTORE_DB=str(tmp_path / "store.db"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        LC_ALL="C",
        LANG="C",
        PYTHONUTF8="0",
        PYTHONCOERCECLOCALE="0",
        PYTHONIOENCODING="cp1252",
        PYTHONWARNDEFAULTENCODING="1",
    )
    return env


def _run(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, timeout=600, check=False
    )


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    done = _run(env, "-m", "contextstore", *args, cwd=cwd)
    assert done.returncode == 0, (args, done.returncode, done.stderr.decode(errors="replace"))
    return done


def _json(env: dict[str, str], cwd: Path, *args: str) -> Any:
    return json.loads(_cli(env, cwd, *args).stdout)


def test_the_shim_takes_away_what_windows_lacks(windowsish: dict[str, str], tmp_path: Path) -> None:
    probe = (
        "import importlib.util, os, select, signal\n"
        "assert not hasattr(signal, 'SIGPIPE') and not hasattr(signal, 'SIGKILL')\n"
        "assert hasattr(signal, 'SIGTERM') and hasattr(signal, 'SIGINT')\n"
        "assert not hasattr(select, 'poll') and not hasattr(os, 'register_at_fork')\n"
        "assert not hasattr(os, 'fdatasync') and not hasattr(os, 'O_CLOEXEC')\n"
        "for name in ('fcntl', 'termios', 'resource', 'pwd'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ImportError:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError(name)\n"
        "import locale, sys, warnings\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    assert 'utf' not in locale.getpreferredencoding(False).lower()\n"
        "try:\n"
        "    open(os.devnull).close()\n"
        "except EncodingWarning:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('open() without an encoding went unnoticed')\n"
        "assert sys.stdout.encoding == 'cp1252'\n"
    )
    done = _run(windowsish, "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_a_users_path_through_the_command_line(windowsish: dict[str, str], tmp_path: Path) -> None:
    help_text = _cli(windowsish, tmp_path, "--help").stdout.decode("cp1252")
    assert "Usage:" in help_text

    _cli(windowsish, tmp_path, "demo")
    listed = _json(windowsish, tmp_path, "conversations", "--json")
    assert len(listed) >= 2
    cid = listed[0]["id"]

    _cli(windowsish, tmp_path, "report", cid, "-o", str(tmp_path / "report.html"))
    assert "<html" in (tmp_path / "report.html").read_text(encoding="utf-8").lower()
    _cli(windowsish, tmp_path, "backup", str(tmp_path / "copy.db"))
    copied = _json(
        windowsish, tmp_path, "--db", str(tmp_path / "copy.db"), "conversations", "--json"
    )
    assert [c["id"] for c in copied] == [c["id"] for c in listed]
    _cli(windowsish, tmp_path, "export", "cline", cid, str(tmp_path / "cline-out"))
    assert (tmp_path / "cline-out" / "api_conversation_history.json").is_file()
    _cli(windowsish, tmp_path, "export", "gemini", cid, str(tmp_path / "out.jsonl"))
    lines = (tmp_path / "out.jsonl").read_bytes().split(b"\n")
    assert all(b"\r" not in line for line in lines)
    assert [json.loads(line) for line in lines if line]


@pytest.mark.skipif(
    not (CLINE.is_dir() and GEMINI.is_dir()), reason="the real agents' files (../shared/real)"
)
def test_the_real_agents_files_come_in_and_go_out(
    windowsish: dict[str, str], tmp_path: Path
) -> None:
    task = cline_tasks_with_history()[0]
    imported = _json(windowsish, tmp_path, "import", "cline", "--json", str(task))
    (item,) = imported["items"]
    assert item["status"] == "imported"
    out = tmp_path / "task"
    _cli(windowsish, tmp_path, "export", "cline", item["conversation_id"], str(out))
    assert json.loads((out / "api_conversation_history.json").read_text(encoding="utf-8")) == (
        json.loads((task / "api_conversation_history.json").read_text(encoding="utf-8"))
    )

    files = [str(path) for path in gemini_files()]
    chats = _json(windowsish, tmp_path, "import", "gemini", "--json", *files)
    assert {i["status"] for i in chats["items"]} == {"imported"}
    elsewhere = ("--db", str(tmp_path / "again.db"))
    for chat in chats["items"]:
        target = tmp_path / f"{chat['conversation_id']}.jsonl"
        _cli(windowsish, tmp_path, "export", "gemini", chat["conversation_id"], str(target))
        again = _json(windowsish, tmp_path, *elsewhere, "import", "gemini", "--json", str(target))
        (item,) = again["items"]
        assert item["status"] == "imported"
        if Path(chat["path"]).name.startswith("session-"):  # a share comes back as a session
            assert item["added"]["messages"] == chat["added"]["messages"]
        assert b"\r" not in target.read_bytes()


@pytest.mark.skipif(POSTGRES_URL is None, reason="set CONTEXTSTORE_TEST_POSTGRES_URL")
def test_a_postgresql_store_opens_appends_and_renders(
    windowsish: dict[str, str], tmp_path: Path
) -> None:
    program = textwrap.dedent(
        """
        import json, sys
        from contextstore import ContextStore

        url, schema = sys.argv[1:]
        options = {"connect_args": {"options": f"-csearch_path={schema}"}}
        with ContextStore.open(url, engine_kwargs=options) as store:
            conv = store.create_conversation(model_id="claude-sonnet-4-5")
            store.append(conv.id, "user", "caf\\u00e9 \\u6211")
            store.append(conv.id, "assistant", "ok")
            print(json.dumps(store.render(conv.id, format="openai")))
        """
    )
    with new_postgres_schema() as schema:
        done = _run(windowsish, "-c", program, str(POSTGRES_URL), schema, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    rendered = json.loads(done.stdout)
    assert [m["role"] for m in rendered] == ["user", "assistant"]
    assert "caf\u00e9 \u6211" in json.dumps(rendered, ensure_ascii=False)
