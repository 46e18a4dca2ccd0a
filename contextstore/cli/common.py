"""What every command shares: the global ``--db`` option, ``--json``, opening the store, and
turning errors into one line on stderr and a documented exit code.

Exit codes: 0 success; 1 a contextstore error without a more specific code, or a question
answered no; 2 bad input or usage (``InvalidInputError``, a click usage error, a refusal to
act without ``--yes``); 3 not found; 4 schema; 5 integrity or a damaged database file;
6 read-only store; 7 busy; 8 storage full; 9 read-only location; 70 an internal error (one
line, and the full traceback written to a file).
"""

from __future__ import annotations

import difflib
import math
import os
import shlex
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from contextstore.cli import terminal
from contextstore.cli.wording import PROGRAM, cli_wording
from contextstore.core.errors import (
    ContextStoreError,
    DatabaseUnavailableError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyLocationError,
)
from contextstore.core.os_errors import NO_SPACE, missing_folder, missing_folder_text, os_error
from contextstore.core.validate import is_utf8, model_id_problem, readable_text
from contextstore.storage.paths import default_database_path, default_location
from contextstore.storage.sqlite_file import (
    inspect_database_file,
    unusable_path,
    writable_location,
)

# The store and SQLAlchemy are imported by the functions that open or name a store, so that
# a command's --help loads neither (see cli/main.py).
if TYPE_CHECKING:
    from contextstore.store import ContextStore

F = TypeVar("F", bound=Callable[..., Any])

INTERNAL_ERROR_EXIT = 70
"""Exit code of an unexpected internal error (sysexits' EX_SOFTWARE)."""
REFUSED_EXIT = 2
"""Exit code when a destructive command is refused for want of ``--yes``."""
DECLINED_EXIT = 1
"""Exit code when the person at the terminal answers no."""
CLOSED_OUTPUT_EXIT = 128 + 13
"""Exit code when the reader of the output went away (``| head``): what a shell reports
for a program that SIGPIPE ended, as ``git log | head`` gives. SIGPIPE is 13 on Linux,
macOS and the BSDs; Windows has none (``signal.SIGPIPE`` is missing there, and naming it
here stopped the whole command line from loading), and gets the same code."""

DB_HELP = (
    "Database file or SQLAlchemy URL (default: $CONTEXTSTORE_DB, else the per-user data "
    "directory). Accepted before or after the command name."
)


class IntegerRange(click.IntRange):
    """``click.IntRange`` that names what it takes: click's refusal of ``abc`` said "is not
    a valid integer range", and its help showed ``INTEGER RANGE``, as if a range were to be
    typed."""

    name = "integer"


class NumberRange(click.FloatRange):
    """``click.FloatRange`` that names what it takes (click said "is not a valid float
    range"), and takes only finite numbers (``nan`` passed every bound, ``inf`` an open
    one)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class Utf8Text(click.types.StringParamType):
    """click's text type, refusing text that is not UTF-8 (an argument's bytes in another
    encoding, which Python reads as lone surrogates) in the terms of the command line: the
    library's refusal named its own parameter (``git_hash is not valid Unicode text``, for
    ``--git-hash``). Paths keep ``click.Path``: a file may be named in another encoding."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        if isinstance(text, str) and not is_utf8(text):
            self.fail(
                f"'{readable_text(text)}' is not UTF-8 text (bytes in another encoding); "
                "pass it in UTF-8.",
                param,
                ctx,
            )
        return text


UTF8_TEXT = Utf8Text()


def refuse_text_not_utf8(cmd: click.Command) -> None:
    """Give each text parameter of ``cmd`` (and, for a group, of its commands) the type
    :class:`Utf8Text`. ``--db`` keeps its own: the store's refusal of such a location says
    the same for ``$CONTEXTSTORE_DB`` and for a ``--db`` before the command name."""
    for param in cmd.params:
        if type(param.type) is click.types.StringParamType and param.name != "db":
            param.type = UTF8_TEXT
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            refuse_text_not_utf8(sub)


class WrittenPath(click.Path):
    """``click.Path`` for a file or folder a command writes.

    The folder that holds it must exist: a mistyped path is refused, naming the folder,
    rather than made into folders nobody looks in (a folder the command writes, such as
    ``export cline``'s OUT_DIR, is made itself, but not its parents). ``-`` is refused
    where standard output cannot take what is written (a folder of task files, a
    database, a file written beside others), since it would be a file of that name in the
    current folder; ``stdout=True`` takes it (``report -o -``). ``./-`` still names such a
    file."""

    def __init__(self, what: str, *, stdout: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.what = what
        self.stdout = stdout

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in ("-", b"-"):
            if self.stdout:
                return super().convert(value, param, ctx)
            self.fail(
                f"'-' means standard output, which cannot take {self.what}; name a path "
                "instead ('./-' for one named '-').",
                param,
                ctx,
            )
        converted = super().convert(value, param, ctx)
        text = os.fsdecode(converted)
        if "://" in text:  # a database URL: the command refuses it, its password masked
            return converted
        try:
            folder = missing_folder(Path(text))
        except (OSError, ValueError):  # a name too long: the command's write names it
            folder = None
        if folder is not None:
            self.fail(f"cannot write {text}: {missing_folder_text(folder)}", param, ctx)
        return converted


def at_most(limit: int) -> Any:
    """A callback refusing an option's text when empty or longer than the store keeps."""

    def check(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value is not None and not 0 < len(value) <= limit:
            raise click.BadParameter(
                f"give 1 to {limit} characters ({len(value):,} given), or leave it out."
            )
        return value

    return check


def model_id_option(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A callback refusing an option's model id as the store would (blank, surrounded by
    whitespace, unprintable, too long), naming the option: the store's refusal named its
    ``model_id`` parameter."""
    problem = None if value is None else model_id_problem(value)
    if problem is not None:
        raise click.BadParameter(
            f"the model id {problem}; give it as its provider names it (e.g. "
            "'claude-sonnet-4-5'), or leave the option out.",
            param=param,
        )
    return value


def report_library_error(exc: ContextStoreError, ctx: click.Context | None = None) -> int:
    """Print a library error as one line in CLI terms (a command it suggests names the
    store ``ctx`` ran on); return its exit code."""
    program = PROGRAM if ctx is None else program_words(ctx)
    terminal.error(cli_wording(str(exc), program))
    return exc.exit_code


def report_internal_error(exc: BaseException) -> int:
    """Write the traceback to a private file, print one line naming it; return 70."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    fd, name = tempfile.mkstemp(prefix=f"contextstore-error-{stamp}-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("".join(traceback.format_exception(exc)))
    summary = str(exc).splitlines()[0] if str(exc) else ""
    terminal.error(
        f"internal error ({type(exc).__name__}{': ' + summary if summary else ''}); "
        f"the full traceback is in {Path(name)}; please report it."
    )
    return INTERNAL_ERROR_EXIT


def run_reporting_errors(ctx: click.Context, work: Callable[[], Any]) -> Any:
    """Run ``work``; a library error or an internal error ends the command with its code.

    The output is flushed before the command ends, so that a write that fails (a full disk
    behind ``> out.json``) is reported as this command's error, not lost at exit."""
    try:
        result = work()
        terminal.flush_output()
        return result
    except click.exceptions.ClickException as exc:
        ctx.exit(terminal.click_error(exc))
    except (click.exceptions.Exit, click.Abort):
        raise
    except ContextStoreError as exc:
        ctx.exit(report_library_error(exc, ctx))
    except BrokenPipeError:
        # The reader of the output went away: what is left to print goes nowhere.
        terminal.discard_output()
        ctx.exit(CLOSED_OUTPUT_EXIT)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            ctx.exit(report_internal_error(exc))
        # The library turns its own writes' errors into StorageFullError: this one is the
        # output's (stdout redirected to a file on a full disk).
        terminal.discard_output()
        doing = "write the output" if exc.filename is None else "write"
        ctx.exit(report_library_error(os_error(exc, doing), ctx))
    except Exception as exc:
        ctx.exit(report_internal_error(exc))


def handle_errors(func: F) -> F:
    """Decorator for a command callback: errors reported as :class:`ContextStoreGroup` does.

    Commands registered on the ``contextstore`` group need not use it (the group reports
    for every command); it remains for callbacks invoked on their own.
    """

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_reporting_errors(click.get_current_context(), lambda: func(*args, **kwargs))

    return wrapper  # type: ignore[return-value]


class ContextStoreGroup(click.Group):
    """A command group that reports every error of its commands as one line and an exit
    code, and gives each command the global ``--db`` option."""

    def invoke(self, ctx: click.Context) -> Any:
        return run_reporting_errors(ctx, lambda: super(ContextStoreGroup, self).invoke(ctx))

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """As click does; the root's ``--help`` and ``--version``, printed while the
        arguments are parsed, end with SIGPIPE's code when their reader went away, as every
        command's output does (click's own handling exited 1)."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            terminal.discard_output()
            raise click.exceptions.Exit(CLOSED_OUTPUT_EXIT) from None
        except click.exceptions.ClickException as exc:
            if parent is not None:
                raise  # reported where the root runs it (run_reporting_errors)
            raise click.exceptions.Exit(terminal.click_error(exc)) from None

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        add_db_option(cmd)
        refuse_text_not_utf8(cmd)
        super().add_command(cmd, name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click does, but a mistyped name is matched against the commands ``--help``
        lists: click's own suggestion may name a hidden alias (``import-cline``)."""
        name = args[0] if args else ""
        if (
            name
            and not name.startswith("-")
            and not ctx.resilient_parsing
            and self.get_command(ctx, name) is None
        ):
            shown = [n for n, c in self.commands.items() if not c.hidden]
            close = difflib.get_close_matches(name, shown)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)


READ_ONLY_HELP = (
    "Open the database read-only (a file on a read-only medium or in a read-only directory); "
    "commands that write are refused. Accepted before or after the command name."
)


def _set_read_only(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(dict)
        ctx.obj["read_only"] = True


def _set_db(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)
        ctx.obj["db"] = value


MAKES_ITS_OWN_DATABASES = frozenset({"bench", "crash-test"})
"""Commands that write scratch databases of their own and never open the store ``--db``
names, so the store's ``--db`` and ``--read-only`` options are not theirs."""


def refuse_store_options(ctx: click.Context, *, own_file: str = "") -> None:
    """Refuse the store's ``--read-only`` and ``--db`` (given before the command name) for
    a command that only writes databases of its own: they would be ignored, and the user
    would think that nothing was written, or that the store named was the one used
    (``own_file``: how the command names a file of its own instead). ``$CONTEXTSTORE_DB``
    stays allowed: it names the store for every command, not for this one."""
    if (ctx.obj or {}).get("read_only"):
        raise click.UsageError(
            f"--read-only does not apply to {ctx.info_name}: it writes new databases of its "
            "own and never opens the store; run it without --read-only.",
            ctx,
        )
    root = ctx.find_root()
    if root.get_parameter_source("db") == ParameterSource.COMMANDLINE:
        raise click.UsageError(
            f"--db before the command does not apply to {ctx.info_name}: it writes new "
            f"databases of its own and never opens the store; run it without that --db"
            f"{own_file}.",
            ctx,
        )


def add_db_option(cmd: click.Command) -> None:
    """Give ``cmd`` (and, for a group, each of its commands) a ``--db`` option that
    overrides the one given before the command name."""
    if cmd.name in MAKES_ITS_OWN_DATABASES:
        return
    if not any(isinstance(p, click.Option) and "--db" in p.opts for p in cmd.params):
        cmd.params.append(
            click.Option(
                ["--db"],
                metavar="PATH_OR_URL",
                expose_value=False,
                callback=_set_db,
                help=DB_HELP,
            )
        )
    if not any(isinstance(p, click.Option) and "--read-only" in p.opts for p in cmd.params):
        cmd.params.append(
            click.Option(
                ["--read-only"],
                is_flag=True,
                expose_value=False,
                callback=_set_read_only,
                help=READ_ONLY_HELP,
            )
        )
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            add_db_option(sub)


def json_option(func: F) -> F:
    """The ``--json`` flag of read commands: JSON with the fields the README documents."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print JSON (field names are stable and documented) instead of a table.",
    )(func)


def yes_option(func: F) -> F:
    """The ``--yes`` flag of destructive commands."""
    return click.option("--yes", "-y", is_flag=True, help="Do it without asking.")(func)


def open_store(
    ctx: click.Context, *, existing: bool | None = None, writes: bool = False, **kwargs: Any
) -> ContextStore:
    """Open the store named by ``--db`` (or the default); closed when the command ends.

    ``existing``: the command needs a store that is already there (a SQLite file that does
    not exist is refused, and nothing is created); by default, when it opens without
    ``auto_migrate``, as the commands that read do.

    ``writes``: the command writes to the store whenever it runs, so ``--read-only`` is no
    way to run it: where nothing can be written it is refused saying so
    (:func:`cannot_write_there`), not with the library's advice to open it read-only. Left
    False by commands that read, and by ``serve``, which serves reads with ``--read-only``."""
    from sqlalchemy.exc import DBAPIError

    from contextstore.storage.driver_errors import first_line
    from contextstore.store import ContextStore

    obj = ctx.find_root().obj or {}
    location = obj.get("db")
    if obj.get("read_only"):
        kwargs["read_only"] = True
    if existing or (existing is None and kwargs.get("auto_migrate") is False):
        _refuse_missing_file(location)
    if writes and kwargs.get("read_only"):
        refuse_read_only_location(ctx)
    try:
        store = ContextStore.open(location, **kwargs)
    except ReadOnlyLocationError as exc:
        if not writes or kwargs.get("read_only"):
            raise
        raise ReadOnlyLocationError(cannot_write_there(ctx, exc.situation)) from exc
    except (DBAPIError, DatabaseUnavailableError) as exc:
        if isinstance(exc, DatabaseUnavailableError) and not _driver_said(exc):
            raise  # contextstore's own words (a file this user may not read, the grants
            # a PostgreSQL role lacks)
        cause = exc.__cause__ if isinstance(exc, DatabaseUnavailableError) else exc
        driver = getattr(cause, "orig", None) or cause or exc
        where = shown_location(location)
        raise ContextStoreError(
            f"cannot open {where}: {first_line(driver)}; check --db (or $CONTEXTSTORE_DB)."
        ) from exc
    ctx.call_on_close(store.close)
    if writes:
        # Refused before the command prints anything (demo printed its first lines, then
        # failed at its first write).
        store.database.check_writable()
    return store


def _driver_said(exc: DatabaseUnavailableError) -> bool:
    """Whether ``exc`` is the driver's refusal to connect, which the command line words as
    a location to check (not a privilege the role lacks: its message names the grants)."""
    from contextstore.storage.privileges import INSUFFICIENT_PRIVILEGE

    cause = exc.__cause__
    driver = getattr(cause, "orig", None) or cause
    return driver is not None and getattr(driver, "sqlstate", None) != INSUFFICIENT_PRIVILEGE


READING_COMMANDS = "conversations, show, audit, search, export"
"""Commands named as the ones that still work on a read-only location with ``--read-only``."""


def command_name(ctx: click.Context) -> str:
    """``import cline``: the command being run, as the user types it after the program and
    its options (a message names it, where a command it suggests is quoted whole)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names))


def refuse_read_only_location(ctx: click.Context) -> None:
    """A command that writes, given ``--read-only`` on a location where nothing can be
    written: the refusal says it cannot run there at all (the library's own words, "drop
    --read-only to write", would lead to that refusal next).

    Raises:
        ReadOnlyLocationError: the SQLite file is there, in a location that cannot be
            written.
    """
    path = sqlite_file(ctx)
    try:
        unwritable = path is not None and path.exists() and not writable_location(path)
    except OSError:  # a name too long: opening the store says so
        return
    if unwritable:
        assert path is not None
        situation = (
            f"{path} is in a location that cannot be written (a read-only file, directory or "
            "medium)"
        )
        raise ReadOnlyLocationError(cannot_write_there(ctx, situation), situation=situation)


def cannot_write_there(ctx: click.Context, situation: str) -> str:
    """The refusal of a command that writes, on a location where nothing can be written:
    what happened, that the command cannot run there (``--read-only`` would not help it),
    and, when a store is there, that the commands that read it can."""
    path = sqlite_file(ctx)
    file_there = path is not None and path.exists()
    copy = " (a copy of this one in a writable directory, for example)" if file_there else ""
    message = (
        f"{situation}; the {command_name(ctx)} command writes to the database, so it cannot "
        "run on a "
        f"read-only location; to run it, point --db at a database that can be written{copy}."
    )
    if path is None or file_there:
        message += f" Commands that only read ({READING_COMMANDS}) work there with --read-only."
    return message


def sqlite_file(ctx: click.Context) -> Path | None:
    """The SQLite file named by ``--db`` (or ``$CONTEXTSTORE_DB``, or the default); None
    for an in-memory store or PostgreSQL."""
    return _sqlite_file_at((ctx.find_root().obj or {}).get("db"))


def _sqlite_file_at(location: str | None) -> Path | None:
    from contextstore.storage.engine import resolve_target

    text = default_location() if location is None else location
    return resolve_target(text, default_database_path()).sqlite_path


def _refuse_missing_file(location: str | None) -> None:
    """Refuse a command that works on an existing store when its SQLite file does not exist,
    before anything (the file, its folders) is created for it.

    Raises:
        NotFoundError: no file at the location named by ``--db``, $CONTEXTSTORE_DB or the
            default.
        InvalidInputError: the location is an in-memory store (empty, and gone when the
            command ends).
        CorruptDatabaseError: no file, but its write-ahead log or journal is there.
        InvalidInputError: the system refuses to look the path up (a name too long).
    """
    from contextstore.storage.engine import resolve_target

    text = default_location() if location is None else location
    target = resolve_target(text, default_database_path())
    if target.in_memory:
        raise InvalidInputError(
            f"{text} (--db or $CONTEXTSTORE_DB) is a new, empty store that lives only while "
            "this command runs, so there is nothing in it to read; name a database file or a "
            "PostgreSQL URL."
        )
    path = target.sqlite_path
    if path is None:
        return  # PostgreSQL
    try:
        if path.exists():
            return
    except OSError as exc:  # a name too long: exists() says False to the rest
        raise unusable_path(path, exc) from exc
    inspect_database_file(path)  # a log left without its database says so
    named = "--db or $CONTEXTSTORE_DB" if location is not None else "the default location"
    raise NotFoundError(
        f"there is no database at {path} ({named}); check the path, or create one by "
        "writing to it ('contextstore import ...', 'contextstore demo')."
    )


def shown_location(location: str | None) -> str:
    """``location`` for a message: a URL with its password masked."""
    if location is None:
        return "the default database"
    if "://" not in location:
        return location
    from contextstore.storage.engine import shown_url

    return shown_url(location)


def program_words(ctx: click.Context) -> list[str]:
    """``contextstore`` and the ``--db`` of the store this run opened, when one was given (a
    URL's password masked): what starts a command a message suggests, so that it can be run
    as printed, in the same environment (a store named by ``$CONTEXTSTORE_DB`` needs no
    ``--db``)."""
    location = (ctx.find_root().obj or {}).get("db")
    named = location is not None and location != os.environ.get("CONTEXTSTORE_DB")
    return [*PROGRAM, "--db", shown_location(location)] if named else [*PROGRAM]


def command_line(ctx: click.Context, *words: str) -> str:
    """The command line that runs ``contextstore WORDS`` on the store this run opened (see
    :func:`program_words`), each word quoted for a POSIX shell."""
    return shlex.join([*program_words(ctx), *words])


def confirm_or_refuse(ctx: click.Context, question: str, *, yes: bool, flag_hint: str) -> None:
    """Go on when ``--yes`` was given or the person at the terminal says yes.

    Off a terminal without ``--yes`` the command is refused (exit 2), so a script never
    hangs on a question nor destroys data unasked; a "no" ends it with exit 1.
    """
    if yes:
        return
    if not terminal.interactive():
        terminal.error(
            f"refusing to go on without confirmation: stdin is not a terminal; pass --yes "
            f"to confirm{flag_hint}."
        )
        ctx.exit(REFUSED_EXIT)
    if not terminal.confirm(question):
        terminal.note("cancelled; nothing was changed.")
        ctx.exit(DECLINED_EXIT)
