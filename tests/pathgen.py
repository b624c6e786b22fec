"""Hypothesis strategies for host paths in every spelling, and a leak oracle.

Reusable by any test (unit or end to end)::

    from tests import pathgen

    @pathgen.CI_SETTINGS
    @given(pathgen.planted_texts())
    def test_no_leak(planted):
        out = rewrite(planted.text, extra_roots=pathgen.CONFIG_ROOTS)
        assert not pathgen.leaked(out, planted.secrets)

Every generated path holds secret folder tokens (``zq`` + 10 random lowercase
letters or digits, so they never occur by chance) wherever its folder part is: a
user name, a folder, a server, a configured root's parent. What may reach a
client is the file name alone (or, for a per-user directory, ``~``): none of the
secrets, in any spelling (:func:`leaked` looks for them raw, case-folded,
JSON-unescaped and percent-decoded).

Strategies
----------
- :func:`host_paths` -> :class:`HostPath` ``(text, secrets, name)``: one path of
  any class (POSIX roots, configured roots and mount prefixes, aliases such as
  ``/System/Volumes/Data``, ``~``/``~user``, ``$HOME``-style variables, drives, UNC,
  device prefixes, ``\\Device\\HarddiskVolumeN``, Cygwin and MSYS drives, ``file:``
  URIs, editor deep links, ``vscode-remote://`` URIs) in any spelling (plain, other
  letter case, doubled separators and ``.`` segments, shell escapes, JSON escaped
  once or twice, ``\\u`` escapes, percent-encoded once or twice, HTML character
  references as separators, a POSIX root followed by Windows separators).
- :func:`planted_texts` -> :class:`Planted` ``(text, secrets, names)``: one or more
  such paths planted in surrounding text (prose, quotes, code spans, markdown
  links and emphasis, JSON strings, query strings, CJK text, after a JSON ``\\n``,
  glued to a command-line flag, after an ANSI colour code, in a strikethrough).
- :func:`non_paths` / :func:`texts_without_paths`: URLs, API routes, fractions,
  relative paths... that must come out unchanged.
- :func:`chunkings`: a split of a text into deltas.

The file names are plain and the folders hold no whitespace (except a
shell-escaped one), so a path is never cut short by a stop character: that
keeps the oracle exact. The configured roots the rewriter must be given are
:data:`CONFIG_ROOTS` (their parents hold secrets too).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar
from urllib.parse import quote, unquote

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

T = TypeVar("T")
SECRET_PREFIX = "zq"
#: configured artifact roots / mount prefixes (pass as ``extra_roots``)
ROOT_SECRET = "zqrootsecret"
CONFIG_ROOTS: tuple[str, ...] = (f"/srv/{ROOT_SECRET}/artifacts", "/workspace", "C:\\agentwork")

#: ~10^4 examples over the module's four CI properties in well under a minute
CI_SETTINGS = settings(
    max_examples=2500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: the ``slow`` soak: many more
SLOW_SETTINGS = settings(
    max_examples=60_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class HostPath(NamedTuple):
    text: str  #: the path as spelled in the text
    secrets: tuple[str, ...]  #: tokens that must never reach a client
    name: str  #: what the path must become (file name, or ``~``)


class Planted(NamedTuple):
    text: str
    secrets: tuple[str, ...]
    names: tuple[str, ...]


# --- building blocks ---------------------------------------------------------------

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"


def _base36(n: int) -> str:
    digits = []
    for _ in range(10):
        n, r = divmod(n, 36)
        digits.append(_ALNUM[r])
    return "".join(reversed(digits))


_SECRET_INT = st.integers(0, 36**10 - 1)
_BOOLS = (False, True)


def secret_tokens() -> st.SearchStrategy[str]:
    """``zq`` + 10 random lowercase letters/digits (one draw: generation stays cheap)."""
    return _SECRET_INT.map(lambda n: SECRET_PREFIX + _base36(n))


def _secret(draw: st.DrawFn) -> str:
    return SECRET_PREFIX + _base36(draw(_SECRET_INT))


@functools.cache
def _index(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


def _int(draw: st.DrawFn, hi: int) -> int:
    """An integer in ``0..hi`` (strategies are built once: drawing stays cheap)."""
    return draw(_index(hi + 1))


def _pick(draw: st.DrawFn, options: Sequence[T]) -> T:
    return options[draw(_index(len(options)))]


_DECORATIONS = ("{}", "{}", ".{}", "{}-v2", "{}_old", "my.{}", "{}.d", "é{}", "{}数据")


def _decorated(draw: st.DrawFn, secret: str) -> str:
    """A folder name holding ``secret``: bare, or with harmless punctuation or letters."""
    return _pick(draw, _DECORATIONS).format(secret)


file_names = st.sampled_from(
    [
        "report.pdf",
        "plot.png",
        "notes.md",
        "data.tar.gz",
        "out",
        ".env",
        "a-b_c.txt",
        "报告.pdf",
        "résumé.docx",
        "v1.2.json",
        "Q3-final.xlsx",
        "x",
    ]
)


def _case(draw: st.DrawFn, word: str) -> str:
    """``word`` in a random letter case (file systems that ignore case)."""
    style = _pick(draw, ["same", "same", "lower", "upper", "title"])
    return {"same": word, "lower": word.lower(), "upper": word.upper(), "title": word.title()}[
        style
    ]


class _Raw(NamedTuple):
    head: str  #: anchor, e.g. "/Users" or "C:" or "~" or "$HOME"
    folders: list[str]
    leaf: str  #: file or directory name; "" ends at the last folder; a final "/" is a separator
    secrets: tuple[str, ...]
    name: str
    win: bool  #: backslash separators
    kind: str  #: "posix", "win", "var", "file", "deeplink", "remote"
    host: str = ""  #: the authority of a "remote" URI


#: space-holding folders software creates below the top (read whole inside a path)
INNER_FOLDERS = [
    "Application Support",
    "Mobile Documents",
    "My Drive",
    "Shared drives",
    "User Data",
    "Saved Games",
    "OneDrive - Contoso Ltd",
    "Dropbox (Contoso)",
    "Visual Studio 2022",
]


def _folders(draw: st.DrawFn, lo: int = 1, hi: int = 3) -> tuple[list[str], list[str]]:
    secrets = list(dict.fromkeys(_secret(draw) for _ in range(lo + _int(draw, hi - lo))))
    folders = [_decorated(draw, s) for s in secrets]
    if folders and _int(draw, 6) == 0:  # /Users/<secret>/Application Support/..., not first
        folders.insert(1 + _int(draw, len(folders) - 1), _pick(draw, INNER_FOLDERS))
    return folders, secrets


dir_names = st.sampled_from(["out", "build", "Desktop", "项目", "v1.2", "data-set"])


def _leaf(draw: st.DrawFn, folders: list[str]) -> tuple[str, str]:
    """(leaf, expected name): a file, or a (non-secret) directory, with or without
    a trailing separator (``trail``: the leaf ends in "/" then)."""
    if _int(draw, 4) == 0:
        name = draw(dir_names)
        return name + ("/" if _pick(draw, _BOOLS) else ""), name
    name = draw(file_names)
    return name, name


# --- path classes -----------------------------------------------------------------


@st.composite
def _posix(draw: st.DrawFn) -> _Raw:
    root = _pick(
        draw,
        [
            "Users",
            "home",
            "root",
            "tmp",
            "private/var/folders",
            "var/tmp",
            "Volumes",
            "mnt",
            "opt",
            "srv",
            "etc",
            "media",
            "run/user/1000",
            "run/media",  # udisks2: /run/media/<user>/<label>
            "usr/home",  # FreeBSD
            "cygdrive/c/Users",  # Cygwin
            "cygdrive/c/Program Files (x86)",  # a space-holding top folder
            "mnt/d/Program Files",  # WSL
            "c/Documents and Settings",
            "c/Users",  # Git Bash, MSYS
            "d/Windows",
        ],
    )
    head = "/" + "/".join(_case(draw, seg) for seg in root.split("/"))
    alias = _pick(draw, ["", "", "", "/System/Volumes/Data", "/proc/4242/root", "/proc/self/root"])
    if " " in root:  # a Windows drive path: never behind a macOS or /proc alias
        alias = ""
    folders, secrets = _folders(draw)
    leaf, name = _leaf(draw, folders)
    if root in ("Users", "home", "media") and _int(draw, 5) == 0:
        folders, leaf, name = folders[:1], _pick(draw, ["", "/"]), "~"  # a home itself
    return _Raw(alias + head, folders, leaf, tuple(secrets), name, False, "posix")


@st.composite
def _configured(draw: st.DrawFn) -> _Raw:
    which = _int(draw, 2)
    if which == 0:  # the artifact root, alone or with more below it
        head = "/" + "/".join(_case(draw, s) for s in ("srv", ROOT_SECRET, "artifacts"))
        folders, secrets = _folders(draw, 0, 2)
        if folders:
            leaf, name = _leaf(draw, folders)
        else:  # the root alone
            leaf, name = _pick(draw, ["", "/"]), "artifacts"
        return _Raw(head, folders, leaf, (ROOT_SECRET, *secrets), name, False, "posix")
    if which == 1:
        head = "/" + _case(draw, "workspace")
        folders, secrets = _folders(draw)
        leaf, name = _leaf(draw, folders)
        return _Raw(head, folders, leaf, tuple(secrets), name, False, "posix")
    head = _case(draw, "c") + ":\\" + _case(draw, "agentwork")
    folders, secrets = _folders(draw)
    leaf, name = _leaf(draw, folders)
    return _Raw(head, folders, leaf, tuple(secrets), name, True, "win")


#: ``~`` as written, and as an HTML renderer may show it: a reference, escaped twice,
#: without its ``;`` (HTML5 reads ``&#126/x`` as ``~/x``; the names after it start with
#: ``zq``, no digit)
_TILDES = (
    *("~", "~", "~", "&#126;", "&#x7E;", "&#126", "&#x7e", "&amp;#126;", "&amp;#x7E;"),
    *("%7E", "%7e"),  # percent-encoded: a query parameter (?path=%7Ealice%2Fx)
)


@st.composite
def _tilde(draw: st.DrawFn) -> _Raw:
    win = _pick(draw, _BOOLS) and _pick(draw, _BOOLS)
    tilde = _pick(draw, _TILDES)
    if _pick(draw, _BOOLS):
        user = _secret(draw)
        folders, secrets = _folders(draw, 0, 2)
        if folders:
            leaf, name = _leaf(draw, folders)
        else:  # ~user/ : that user's home itself
            leaf, name = "/", "~"
        return _Raw(tilde + user, folders, leaf, (user, *secrets), name, win, "posix")
    folders, secrets = _folders(draw)
    leaf, name = _leaf(draw, folders)
    return _Raw(tilde, folders, leaf, tuple(secrets), name, win, "posix")


@st.composite
def _var(draw: st.DrawFn) -> _Raw:
    head, win = _pick(
        draw,
        [
            ("$HOME", False),
            ("${HOME}", False),
            ("$TMPDIR", False),
            ("%USERPROFILE%", True),
            ("%userprofile%", True),
            ("%HOMEPATH%", True),
            ("%HOMEDRIVE%%HOMEPATH%", True),
            ("%APPDATA%", True),
            ("$env:USERPROFILE", True),
            ("${env:USERPROFILE}", True),
            ("%ProgramData%", True),
            ("%WINDIR%", True),
            ("%SystemDrive%\\Program Files", True),
            ("%ProgramFiles(x86)%", True),
            ("%CommonProgramFiles%", True),
            ("%OneDriveCommercial%", True),
            ("%MyToolHome%", True),  # any %NAME% then a backslash
            ("%MyToolHome%\\Program Files", True),  # and a space-holding folder
            ("%SystemDrive%\\.\\Documents and Settings", True),
            ("${HOME:-/root}", False),  # a shell default
            ("$HOME", True),
        ],
    )
    folders, secrets = _folders(draw)
    leaf, name = _leaf(draw, folders)
    return _Raw(head, folders, leaf, tuple(secrets), name, win, "var")


_GUID = "{12345678-abcd-1234-abcd-123456789abc}"


@st.composite
def _windows(draw: st.DrawFn) -> _Raw:
    form = _pick(
        draw,
        [
            *("drive", "drive", "users", "rootrel", "unc", "device", "device_unc", "ntdevice"),
            *("progfiles", "progfiles", "ntname", "systemroot"),
        ],
    )
    folders, secrets = _folders(draw)
    leaf, name = _leaf(draw, folders)
    drive = _case(draw, "C") + ":"
    if form == "users":
        head = drive + "\\" + _case(draw, "Users")
        if _int(draw, 5) == 0:
            folders, leaf, name = folders[:1], "", "~"
    elif form == "rootrel":  # \Users\<user>\...: no drive letter
        head = "\\" + _case(draw, "Users")
    elif form == "drive":
        head = drive
    elif form == "ntdevice":  # \Device\HarddiskVolume3\...
        head = "\\" + _case(draw, "Device") + "\\" + _case(draw, "HarddiskVolume3")
    elif form == "ntname":  # any NT device name, \Device\ or \Device/
        dev = _pick(
            draw,
            ["HarddiskVolumeShadowCopy1", "Mup", "CdRom0", "NTPNP_PCI0015", "Serial-Port1"],
        )
        head = "\\" + _case(draw, "Device") + _pick(draw, ["\\", "/"]) + dev
    elif form == "systemroot":
        head = "\\" + _case(draw, "SystemRoot")
    elif form == "progfiles":  # C:\Program Files\..., also behind a device prefix
        top = _pick(draw, ["Program Files", "Program Files (x86)", "Documents and Settings"])
        lead = _pick(draw, ["", "", "\\\\?\\", "\\GLOBAL??\\"])
        # a volume without a drive letter, a share's root (the server is a secret)
        vol = _pick(
            draw, ["", "", "", "\\Device\\HarddiskVolume3", "\\\\?\\Volume" + _GUID, "share"]
        )
        if vol == "share":
            server = _secret(draw)
            vol, secrets = "\\\\" + server + "\\C$", [server, *secrets]
        head = (vol or lead + drive) + _pick(draw, ["\\", "\\", "\\.\\"]) + _case(draw, top)
    elif form == "unc":
        server = _secret(draw)
        head, secrets = "\\\\" + server, [server, *secrets]
    elif form == "device":
        head = _pick(draw, ["\\\\?\\", "\\\\.\\", "\\??\\", "\\GLOBAL??\\"]) + drive
    else:
        server = _secret(draw)
        head, secrets = "\\\\?\\UNC\\" + server, [server, *secrets]
    sep_fwd = form in ("drive", "users", "progfiles") and _int(draw, 3) == 0
    return _Raw(head, folders, leaf, tuple(secrets), name, not sep_fwd, "win")


_URI_BASES = st.one_of(_posix(), _windows().filter(lambda r: r.head[1:2] == ":"))


@st.composite
def _uri(draw: st.DrawFn) -> _Raw:
    base = draw(_URI_BASES)
    kind = _pick(draw, ["file", "file", "deeplink", "remote"])
    if kind == "remote":
        if base.head[1:2] == ":":
            kind = "deeplink"
        else:  # vscode-remote://ssh-remote+<host>/<path>: the host is a secret too
            host = _secret(draw)
            return base._replace(kind=kind, win=False, secrets=(host, *base.secrets), host=host)
    return base._replace(kind=kind, win=False)


def _join(raw: _Raw, sep: str) -> str:
    text = sep.join([raw.head, *raw.folders])
    return (
        text + sep + raw.leaf[:-1] + sep
        if raw.leaf.endswith("/")
        else (text + sep + raw.leaf if raw.leaf else text)
    )


# --- spellings --------------------------------------------------------------------


def _json1(s: str, slash: bool, ascii_only: bool) -> str:
    out = json.dumps(s, ensure_ascii=ascii_only)[1:-1]
    return out.replace("/", "\\/") if slash else out


#: folders that begin like a JSON escape after a backslash (\\r, \\b, \\t, \\n, \\f)
_ESC_LIKE_FOLDERS = ("repos", "build", "tools", "new", "files", "Release", "bin")
_GIT_BASH_DRIVE = re.compile(r"/(?:(?:cygdrive|mnt)/)?[a-z]/", re.IGNORECASE)


def _win_raw(draw: st.DrawFn, raw: _Raw) -> str | None:
    """A drive inside a ``file:`` URI or an editor deep link, or a Git Bash / WSL drive
    path, written with raw backslashes (Laravel Ignition fills ``vscode://file/%f:%l``
    with a Windows path), a folder after a backslash beginning like a JSON escape; None
    when ``raw`` has no drive (or is a home itself: a folder before the user's would
    name another file)."""
    if raw.name == "~":
        return None
    folders = [_pick(draw, _ESC_LIKE_FOLDERS), *raw.folders]
    raw = raw._replace(folders=folders)
    if raw.kind in ("file", "deeplink") and raw.head[1:2] == ":":
        text = _join(raw, "\\")
        if _pick(draw, _BOOLS):  # C:/Users/bob\\repos\\x: forward slashes first
            text = text.replace("\\", "/", _int(draw, 3))
        if raw.kind == "file":
            return _pick(draw, ["file:///", "file:/", "file://localhost/", "FILE:///"]) + text
        scheme = _pick(draw, ["vscode", "vscode-insiders", "cursor", "windsurf"])
        return f"{scheme}://file/{text}{_pick(draw, ['', ':12', ':3:7'])}"
    if raw.kind == "posix" and not raw.win and _GIT_BASH_DRIVE.match(raw.head + "/"):
        text = _join(raw, "\\")
        return text.replace("\\", "/", 1) if _pick(draw, _BOOLS) else text
    return None


def _spelled(draw: st.DrawFn, raw: _Raw) -> str:
    """The path text of ``raw`` in one spelling."""
    sep = "\\" if raw.win else "/"
    spelling = _pick(
        draw,
        [
            "plain",
            "plain",
            "odd_seps",
            "shell",
            "json",
            "json_slash",
            "json_ascii",
            "json2",
            "pct",
            "pct_lower",
            "pct2",
            "html",
            "mixed",
            "uesc",
            "winraw",
        ],
    )
    if "%" in raw.head:  # a percent-encoded tilde: plain, or every separator encoded too
        text = _join(raw, sep)
        if spelling.startswith("pct"):
            text = text.replace(sep, "%2F" if sep == "/" else "%5C")
        return text
    if spelling == "winraw":
        won = _win_raw(draw, raw)
        if won is not None:
            return won
        spelling = "plain"
    if "&" in raw.head and spelling not in ("plain", "html", "json", "json_slash"):
        spelling = "html"  # an HTML-encoded tilde: a renderer's text, not re-encoded
    shell_json = (
        spelling == "json" and _int(draw, 3) == 0
    )  # tool arguments: JSON text of My\\ Drive
    if (spelling == "shell" or shell_json) and raw.kind == "posix" and not raw.win and raw.folders:
        raw = raw._replace(folders=[raw.folders[0] + "\\ copy", *raw.folders[1:]])
    text = _join(raw, sep)
    if raw.kind == "file":
        if raw.head[1:2] == ":":
            text = "file:///" + quote(text.replace("\\", "/"))
        else:
            text = _pick(draw, ["file://", "file:", "file://localhost", "FILE://"]) + quote(text)
    elif raw.kind == "remote":
        scheme = _pick(
            draw,
            [
                "vscode-remote://",
                "cursor-remote://",
                "vscode-insiders-remote://",
                "vscode://vscode-remote/",
                "vscode-insiders://vscode-remote/",
            ],
        )
        user = _pick(draw, ["ssh-remote+", "ssh-remote+git@", "wsl+", ""])
        port = _pick(draw, ["", "", ":22", ":2222"])  # an authority with a port
        text = f"{scheme}{user}{raw.host}{port}{text}"
    elif raw.kind == "deeplink":
        scheme = _pick(draw, ["vscode", "vscode-insiders", "cursor", "windsurf", "myeditor"])
        line = _pick(draw, ["", ":12", ":3:7"])
        path = text.replace("\\", "/")
        text = f"{scheme}://file{'' if path.startswith('/') else '/'}{path}{line}"
    if spelling == "odd_seps" and raw.kind == "posix" and not raw.win and text.startswith("/"):
        segs = text.split("/")
        text = "/".join(
            s + _pick(draw, ["", "", "/", "/."]) if 0 < i < len(segs) - 1 else s
            for i, s in enumerate(segs)
        )
        if _pick(draw, _BOOLS):
            text = _pick(draw, ["/", "/."]) + text
    elif spelling in ("json", "json_slash", "json_ascii"):
        text = _json1(text, spelling == "json_slash", spelling == "json_ascii")
    elif spelling == "json2":
        text = _json1(_json1(text, _pick(draw, _BOOLS), False), False, False)
    elif spelling == "html" and raw.kind in ("posix", "var", "win"):
        # HTML character references as separators (a markdown renderer shows / and \\)
        refs = ["&#x5C;", "&#92;", "&bsol;", "&amp;#x5C;"]
        refs = refs if raw.win else ["&#x2F;", "&#47;", "&sol;", "&amp;#x2F;"]
        text = text.replace(sep, _pick(draw, refs))
    elif spelling == "uesc" and raw.kind in ("posix", "var", "win"):
        # \\u002f, \\u005c separators outside a JSON string (an escaper's output: every
        # separator escaped, also those of a drive path written with forward slashes)
        text = text.replace("\\", "\\u005c").replace("/", "\\u002f")
    elif spelling == "mixed" and raw.kind == "posix" and not raw.win and "/" not in raw.head[1:]:
        # /home\\bob\\x.txt: a POSIX root, then Windows separators
        i = len(raw.head)
        text = text[:i] + text[i:].replace("/", "\\")
    elif spelling in ("pct", "pct_lower", "pct2"):
        text = quote(text, safe="")
        if spelling == "pct_lower":
            text = re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)
        if spelling == "pct2":
            text = quote(text, safe="")
    return text


@st.composite
def _host_path(draw: st.DrawFn) -> HostPath:
    raw = draw(_RAW_PATHS)
    return HostPath(_spelled(draw, raw), raw.secrets, raw.name)


_RAW_PATHS = st.one_of(_posix(), _configured(), _tilde(), _var(), _windows(), _uri())
_HOST_PATHS = _host_path()


def host_paths() -> st.SearchStrategy[HostPath]:
    """One host path of any class in any spelling."""
    return _HOST_PATHS


# --- planting ---------------------------------------------------------------------

_WORDS = st.lists(
    st.sampled_from(
        [
            "the",
            "file",
            "is",
            "at",
            "see",
            "saved",
            "ok",
            "42",
            "and/or",
            "1/2",
            "中文",
            "très",
            "—",
            "https://example.com/home/x",
            "/v1/models",
            "C: drive",
            "50%",
            "$5",
            "~5",
            "10:30",
        ]
    ),
    max_size=6,
).map(" ".join)

#: (before, after) around a path: each before ends at a boundary, each after at a stop
CONTEXTS: tuple[tuple[str, str], ...] = (
    (" ", " "),
    (" ", ". "),
    (" ", ", and"),
    ("(", ")"),
    ('"', '"'),
    ("'", "'"),
    ("`", "`"),
    ("<", ">"),
    ("[doc](", ")"),
    ("[", "]"),
    ("**", "**"),
    ("_", "_"),
    ("| ", " |"),
    ('{"path": "', '"}'),
    ('{\\"path\\": \\"', '\\"}'),
    ("line\\n", "\\nmore"),
    ("\tpath=", "&next=1"),
    ("http://viewer.example/open?path=", "&x=1"),
    ("保存在", "。然后"),
    ("文件：", "，好的"),
    ("\n", "\n"),
    (" -I", " -o out"),  # a flag glued to its value
    (" --include", " "),
    ("\x1b[1;34m", "\x1b[0m "),  # ANSI colour code
    ("\x1b[01m\x1b[K-I", "\x1b[m\x1b[K "),  # a flag after a colour code (gcc)
    ("~~-L", "~~ "),  # a flag after ~~
    ("\x1b(B\x1b[m", " "),  # tput sgr0
    ("\x9b1;34m", "\x9b0m "),  # 8-bit CSI
    ("\\E[1m", " "),  # a textual escape
    ("~~", "~~ "),  # markdown strikethrough
)


@st.composite
def planted_texts(draw: st.DrawFn, max_paths: int = 3) -> Planted:
    """Prose with 1..``max_paths`` host paths planted in it."""
    parts: list[str] = []
    secrets: list[str] = []
    names: list[str] = []
    for _ in range(1 + _int(draw, max_paths - 1)):
        hp = draw(_HOST_PATHS)
        before, after = _pick(draw, CONTEXTS)
        gap = _pick(draw, (" ", "\n", "  "))
        parts += [draw(_WORDS), gap, before, hp.text, after, gap]
        secrets += hp.secrets
        names.append(hp.name)
    parts.append(draw(_WORDS))
    return Planted("".join(parts), tuple(secrets), tuple(names))


NON_PATHS: tuple[str, ...] = (
    "https://host/home/x",
    "http://example.com/Users/",
    "https://example.com/tmp/a.txt?x=1",
    "http://127.0.0.1:8642/srv/x",
    "/v1/models",
    "/v1/chat/completions",
    "/api/v1/users/list",
    "1/2",
    "3/4 cup",
    "and/or",
    "../tmp/x.txt",
    "./home/x",
    "src/gateway/app.py",
    "2024/01/02",
    "50%",
    "$5 or $HOME",
    "~5 minutes",
    "~ alone",
    "10:30",
    "ratio 3:1",
    "C: drive",
    "/tmp",
    "/tmp/",
    "~/",
    "$HOME/",
    "x//tmp/a",
    "café/tmp/x",
    "profile:///x",
    "x-I/home/x",
    "a-b/home/x",
    "[1;34m/tmp/x",
)


_NON_PATH_CONTEXTS = ((" ", " "), (" (", ") "), ("\n", "\n"), (", ", ". "), (" `", "` "))


def non_paths() -> st.SearchStrategy[str]:
    return st.sampled_from(NON_PATHS)


@st.composite
def texts_without_paths(draw: st.DrawFn) -> str:
    """Prose around URLs, API routes, fractions...: must come out unchanged."""
    parts = []
    for _ in range(1 + _int(draw, 3)):
        before, after = _pick(draw, _NON_PATH_CONTEXTS)
        parts += [draw(_WORDS), before, _pick(draw, NON_PATHS), after]
    return "".join(parts)


@st.composite
def chunkings(draw: st.DrawFn, text: str, max_cuts: int = 12) -> list[str]:
    """``text`` split at random points (possibly every character)."""
    if text and draw(st.integers(0, 9)) == 0:
        return list(text)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=max_cuts))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


# --- the oracle -------------------------------------------------------------------

_JSON_ESC = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))", re.DOTALL)


def _json_unescape(s: str) -> str:
    def one(m: re.Match[str]) -> str:
        return chr(int(m.group(1), 16)) if m.group(1) else m.group(2)

    return _JSON_ESC.sub(one, s)


#: the spellings a secret may hide in: raw, percent-decoded, JSON-unescaped
DECODERS: tuple[Callable[[str], str], ...] = (
    lambda s: s,
    unquote,
    lambda s: unquote(unquote(s)),
    _json_unescape,
    lambda s: _json_unescape(_json_unescape(s)),
    lambda s: unquote(_json_unescape(s)),
)


def leaked(output_text: str, secret_tokens: tuple[str, ...] | list[str]) -> list[str]:
    """The secrets found in ``output_text`` in any spelling (raw, any letter case,
    JSON-unescaped, percent-decoded once or twice)."""
    if not secret_tokens:
        return []
    views = {dec(output_text).casefold() for dec in DECODERS}
    return [s for s in secret_tokens if any(s.casefold() in v for v in views)]
