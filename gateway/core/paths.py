"""Host-local path detector (sans-IO).

Strategy
--------
The detector answers one question for the streaming rewriter: starting at ``pos``
in a buffer of text, where is the next host-local path, where does it end, and is
that already certain or does it depend on text that has not arrived yet?

*Normal form.* A path is recognised in any spelling that software produces and
handed on in one normal form (``PathMatch.path``):

- decoded: percent-encoding (``%2F``, ``%5C``, ``%252F``...) and JSON string
  escapes (``\\/``, ``\\\\``, ``\\u002f``, ``\\u00e9``; one or two levels) are
  undone, and so are shell escapes (``\\ ``) of a plain POSIX path;
- prefixed forms reduced: ``file:`` URIs (``file:/x``, ``file:///x``,
  ``file://host/x``), editor deep links (``vscode://file/x:12``), Windows device
  prefixes (``\\\\?\\``, ``\\\\.\\``, ``\\??\\``, ``\\\\?\\UNC\\``), the macOS firmlink
  ``/System/Volumes/Data`` and ``/proc/<pid>/root`` are dropped; ``$HOME``,
  ``${HOME}``, ``%USERPROFILE%``, ``$env:USERPROFILE``, ``%HOMEDRIVE%%HOMEPATH%``
  become ``~``;
- canonical separators: POSIX ``/``, Windows ``\\`` (drive letter upper case); runs
  of separators and ``.`` segments collapse, a trailing separator is dropped;
- a configured root or mount prefix written in another letter case gets its
  configured spelling (``/Workspace/x`` -> ``/workspace/x``).

The name (``PathMatch.name``) is the last segment of the normal form; a per-user
directory itself (``/Users/alice``, ``/media/bob``, ``~alice``) is ``~``.

Rules
-----
1. *Triggers.* Every start holds one of ``/ ~ \\ : % $ &``; one compiled character
   class finds them, so prose without any costs a single C-level scan. Starts that
   begin with letters (``C:``, ``file:``, ``vscode://``) are found from their colon
   by looking back over the word before it.
2. *Start.* One grammar (:func:`_start_grammar`) holds every start form,
   case-insensitively, compiled per first character into the starts and a twin
   that matches exactly the *prefixes* of those starts. At the end of a buffer the
   twin answers "could this still become a start?" (hold it) with no guess; a
   letters-only tail needs only a set lookup (``C``, ``fil``, ``vsco``).
   A start counts only at a boundary: not right after a letter or digit of a
   space-separated script or after ``/ \\ . ~`` (keeps URLs, ``and/or``,
   ``../tmp`` out); a JSON ``\\n``/``\\t`` or a ``%XX`` escape, an escape
   sequence (``ESC[1;34m``, ``ESC(B``), ``~~`` or a glued flag (``-I``,
   ``--include``) whose ``-`` is at a boundary itself before it is a boundary.
   A configured root of two or more segments starts also after a letter, digit,
   ``.`` or ``~``. ``//`` right after ``:`` is a URL authority, never
   a POSIX path.
3. *Body.* Generic anchors (``/tmp/``, ``~/``, ``C:\\``, ``$HOME/``) need a
   non-separator after them; a configured root or mount prefix and ``~user/`` are
   paths on their own.
4. *End.* The one or two characters before the start give the context: after
   `` ` ``, ``"``, ``'``, ``<``, ``](`` or a typographic quote (``“ ‘ « ‹ „ 「 『``) the
   path runs to the matching closer on the same line (*quoted*); after ``[`` it is link text; otherwise it is *prose* and
   ends at whitespace, a quote, backtick, angle bracket, ``*``, ``|``, an unbalanced
   closing bracket, CJK punctuation, a JSON escape (``\\n``, ``\\"``; not in a plain
   Windows path, where ``\\`` is the separator), after a percent-encoded path also
   at ``& # ? =``; trailing ASCII sentence punctuation is given back.
5. *Bound.* Nothing longer than ``max_path_chars`` is held: a quoted candidate
   without its closer by then is re-read as prose, and a longer prose path is
   *overlong*: consumed to its end keeping only its last segment
   (:class:`OverlongPath`). The work is linear: brackets are followed at most that
   far, and the searches quoted starts share are memoised per buffer (:class:`Memo`).

Every decision depends only on the text (never on where a chunk ended) and looks
back at most :data:`LOOKBEHIND` characters before ``pos``, which is what makes the
rewriter's output independent of chunking.
"""

from __future__ import annotations

import functools
import html
import re
import sys
from collections.abc import Iterable
from enum import Enum
from typing import NamedTuple
from urllib.parse import unquote

DEFAULT_ROOT_NAMES: tuple[str, ...] = (
    "Users",
    "home",
    "root",
    "tmp",
    "private",
    "var",
    "Volumes",
    "mnt",
    "opt",
    "srv",
    "etc",
    "media",
    "run/user",
    # udisks2 mounts (Fedora, Arch): /run/media/<user>/<label>; FreeBSD homes
    "run/media",
    "usr/home",
)
#: editor deep links ``<scheme>://file/<abs path>[:line[:col]]`` replaced whole
#: (any other scheme: the path from ``//file`` on is replaced, the scheme stays)
EDITOR_SCHEMES: tuple[str, ...] = (
    "vscode-insiders",
    "vscode",
    "vscodium",
    "cursor",
    "windsurf",
    "zed",
)
#: environment variables whose value is a host folder (``$X/``, ``${X}/``, ``%X%\\``...)
HOME_VARS: tuple[str, ...] = ("home", "userprofile", "homepath")
FOLDER_VARS: tuple[str, ...] = (
    *HOME_VARS,
    "homedrive",
    "appdata",
    "localappdata",
    "tmpdir",
    "temp",
    "tmp",
    "onedrive",
    "programdata",
    "programfiles",
    "allusersprofile",
    "public",
    "systemroot",
    "windir",
    "systemdrive",
    "programfiles(x86)",
    "programw6432",
    "commonprogramfiles(x86)",
    "commonprogramfiles",
    "onedriveconsumer",
    "onedrivecommercial",
)
#: Windows top folders that make ``/c/<folder>`` (Git Bash, MSYS) a drive path
WIN_TOP_FOLDERS: tuple[str, ...] = (
    "users",
    "windows",
    "program files (x86)",
    "program files",
    "programdata",
    "documents and settings",
)
#: ``vscode-remote://<authority>/<abs path>``: replaced whole
REMOTE_SCHEME = "vscode-remote"
#: every editor's remote scheme (``cursor-remote://``, ``vscode-insiders-remote://``)
REMOTE_SCHEMES: tuple[str, ...] = tuple(f"{s}-remote" for s in EDITOR_SCHEMES)
DEFAULT_MAX_PATH_CHARS = 4096
#: the last segment of an overlong path is kept up to this many characters
MAX_NAME_CHARS = 255
#: characters before ``pos`` a decision may look at (the rewriter keeps this many)
LOOKBEHIND = 64
#: characters of a start's head whose prefix answer :class:`PathDetector` memoises
HEAD_CHARS = 8
#: memoised heads per detector (forgotten all at once when full: a bounded dict)
HEAD_MEMO_MAX = 4096


class Context(Enum):
    """How the text around a path delimits it, which decides its replacement."""

    PROSE = "prose"  # [name](url) or name
    QUOTED = "quoted"  # inside "..", '..', <..> or ](..): bare url or name
    CODE = "code"  # a whole code span `..` (both backticks in raw): [`name`](url) or `name`
    LINK_TEXT = "link_text"  # inside [..]: the name alone


class PathMatch(NamedTuple):
    """A complete host-local path found in the text (immutable)."""

    raw: str  #: the text that is replaced ("" for an overlong path: never kept whole)
    path: str  #: normal form handed to the resolver (see the module docstring)
    name: str  #: the file name alone (never a folder part), decoded
    context: Context
    overlong: bool = False
    suffix: str = ""  #: literal text emitted after the replacement (overlong paths only)
    json_level: int = 0  #: JSON string escaping around the path: the replacement gets it too
    pct_level: int = 0  #: percent-encoding of the path: the name gets it too


# --- the start grammar --------------------------------------------------------
#
# Each node carries the regex of its language and the regex of every prefix of a
# string in it (the empty string and the whole string included), so "the buffer
# ends inside a start" is a regex match, not a guess.


class _P(NamedTuple):
    full: str
    prefix: str
    maxlen: int


def _lit(s: str) -> _P:
    prefix = ""
    for ch in reversed(s):
        prefix = f"(?:{re.escape(ch)}{prefix})?"
    return _P(re.escape(s), prefix, len(s))


def _ch(cls: str) -> _P:
    """One character of class ``cls`` (a regex matching exactly one character)."""
    return _P(f"(?:{cls})", f"(?:{cls})?", 1)


def _seq(*ps: _P) -> _P:
    prefix = ps[-1].prefix
    for p in reversed(ps[:-1]):
        prefix = f"(?:{p.full}{prefix}|{p.prefix})"
    return _P("".join(p.full for p in ps), prefix, sum(p.maxlen for p in ps))


def _alt(*ps: _P) -> _P:
    return _P(
        "(?:" + "|".join(p.full for p in ps) + ")",
        "(?:" + "|".join(p.prefix for p in ps) + ")",
        max(p.maxlen for p in ps),
    )


def _rep(p: _P, lo: int, hi: int) -> _P:
    prefix = f"(?:{p.full}){{0,{hi - 1}}}{p.prefix}" if hi > 1 else p.prefix
    return _P(f"(?:{p.full}){{{lo},{hi}}}", prefix, p.maxlen * hi)


def _lazy(p: _P) -> _P:
    """A repetition that takes as little as it can (same prefixes)."""
    assert p.full.endswith("}")
    return _P(p.full + "?", p.prefix, p.maxlen)


def _opt(p: _P) -> _P:
    return _rep(p, 0, 1)


def _look(p: _P) -> _P:
    """A lookahead; only as the last element of a start (its prefix is consumed)."""
    return _P(f"(?={p.full})", p.prefix, p.maxlen)


def _group(name: str, p: _P) -> _P:
    return _P(f"(?P<{name}>{p.full})", p.prefix, p.maxlen)


def _enc(ch: str) -> _P:
    """``ch`` plain or percent-encoded once or twice (``:`` ``%3a`` ``%253a``)."""
    code = f"{ord(ch):02x}"
    return _alt(_lit(ch), _lit("%" + code), _lit("%25" + code))


_BS = _lit("\\")
#: HTML character references a markdown renderer shows as a slash / a backslash
#: (also escaped twice, ``&amp;#x2F;``: a renderer shows that as ``&#x2F;``)
_HTML_SLASHES = ("&#x2f;", "&#47;", "&sol;", "&amp;#x2f;", "&amp;#47;", "&amp;sol;")
_HTML_BACKSLASHES = ("&#x5c;", "&#92;", "&bsol;", "&amp;#x5c;", "&amp;#92;", "&amp;bsol;")


def _bare_ref(hex_ref: str, dec_ref: str) -> _P:
    """A numeric reference without its ``;`` (HTML5 accepts it) where no digit follows:
    ``&#x2Fhome`` is ``/home``, ``&#x2Fetc`` is U+2FE + ``tc``."""
    return _alt(
        _seq(_lit(hex_ref), _look(_ch("[^0-9a-f;]"))), _seq(_lit(dec_ref), _look(_ch("[^0-9;]")))
    )


_BS_ENC = _alt(
    _lit("\\\\u005c"),  # two JSON levels of \u005c (before the one-level one)
    _lit("%5c"),
    _lit("%255c"),
    _lit("\\u005c"),
    *[_lit(e) for e in _HTML_BACKSLASHES],
    _bare_ref("&#x5c", "&#92"),
)
#: a POSIX separator: plain, JSON-escaped (one or two levels), \u-escaped, percent-encoded,
#: an HTML character reference
_PS_ENC = (
    *[_lit(bs + "/") for bs in ("\\", "\\\\", "\\\\\\")],
    *[_lit(e) for e in ("\\\\u002f", "\\u002f", "%2f", "%252f", *_HTML_SLASHES)],
    _bare_ref("&#x2f", "&#47"),
)
_PS = _alt(_lit("/"), *_PS_ENC)
#: a Windows separator: backslashes (1, 2, 4... for JSON levels), \u- or percent-encoded;
#: the encoded ones first: ``\u005c`` is one separator, not ``\`` and a word ``u005c``
_WS = _alt(_BS_ENC, _rep(_BS, 1, 8))
#: separators with doubled ones and ``.`` segments (``//``, ``/./``)
_PSEPS = _seq(_PS, _rep(_alt(_PS, _seq(_lit("."), _PS)), 0, 6))
_COLON = _enc(":")
_SEP_AT = re.compile(f"{_PS.full}|{_WS.full}", re.IGNORECASE)
#: a letter, a colon and two slashes in any spelling: a scheme's, not a drive's
_SCHEME_SLASHES = re.compile(rf"[a-z](?::|%3a|%253a)(?:{_PS.full}){{2}}", re.IGNORECASE)
_STOP_CLASS = r"[\s\"'`<>*|()\[\]{}\x00-\x1f\x7f。，、；：！？「」『』（）【】《》〈〉]"


def _segments(root: str) -> _P:
    parts = [_lit(seg) for seg in root.strip("/").split("/") if seg]
    seq = [parts[0]]
    for p in parts[1:]:
        seq += [_PSEPS, p]
    return _seq(*seq)


def _root_end() -> _P:
    """A configured root ends at any character that cannot continue its last folder's
    name (a letter or digit, ``.`` and one: ``/workspaces``, ``/workspace.bak`` are other
    folders): a separator, a stop, punctuation, ``_`` of emphasis, ``~~``, a typographic
    mark (``”``, ``—``, ``…``), U+00A0, U+200B... or the end. Its name is known, so what follows it is no name
    of its own; the path then runs on to its end as any path does (``artifacts_old/x``
    becomes ``x``), which never shows a folder. Two characters at most decide (the
    prefix holds them, like the characters of a start)."""
    full = r"(?![^\W_]|\.[^\W_])"  # not a letter or digit, nor . and one (artifacts.bak)
    prefix = r"(?:(?![^\W_]|\.)[\s\S]|\.(?:(?![^\W_])[\s\S])?)?"
    return _P(full, prefix, 2)


_ALIAS_START = _alt(
    _seq(_lit("system"), _PSEPS, _lit("volumes"), _PSEPS, _lit("data")),
    _seq(
        _lit("proc"),
        _PSEPS,
        _alt(_rep(_ch("[0-9]"), 1, 10), _lit("self"), _lit("thread-self")),
        _PSEPS,
        _alt(_lit("root"), _lit("cwd")),
    ),
)


def _var_start() -> _P:
    """``$HOME``, ``${HOME}``, ``$env:USERPROFILE``, ``%USERPROFILE%``, ... (any case)."""
    names = _alt(*[_lit(v) for v in FOLDER_VARS])
    dollar, pct = _enc("$"), _enc("%")
    return _alt(
        _seq(pct, _lit("homedrive"), pct, pct, _lit("homepath"), pct),
        _seq(dollar, _opt(_seq(_lit("env"), _COLON)), names),
        _seq(dollar, _enc("{"), _opt(_seq(_lit("env"), _COLON)), names, _enc("}")),
        # ${HOME:-/root}: a shell default (any text up to the brace)
        _seq(
            dollar,
            _enc("{"),
            names,
            _opt(_COLON),
            _alt(_lit("-"), _lit("=")),
            _rep(_ch(r"[^}\s]"), 0, 64),
            _enc("}"),
        ),
        _seq(pct, names, pct),
    )


#: Windows top folders holding a space: read as one segment after any drive form
#: (``C:\\Program Files\\x``, ``/cygdrive/c/Program Files (x86)/x``), else the path
#: would end at the space and the rest (a folder) would leak
def _folder_name(name: str) -> _P:
    """A top folder name; its space and parentheses may be percent-encoded (``%20``),
    the space also shell-escaped (``Program\\ Files``)."""
    parts: list[_P] = []
    for ch in name:
        if ch == " ":  # also doubled (``Program  Files``: a typo names the same folder)
            parts.append(_rep(_alt(_enc(" "), _lit("\\ ")), 1, 3))
        elif ch in "()":
            parts.append(_enc(ch))
        else:
            parts.append(_lit(ch))
    return _seq(*parts)


_SPACEY = _alt(*[_folder_name(w) for w in WIN_TOP_FOLDERS if " " in w])

#: space-holding folders below the top that software creates (macOS, Google Drive,
#: iCloud, OneDrive, Chrome, Windows shell folders): read whole inside a prose path
#: (``~/Library/Application Support/x``), else the path would end at the space
INNER_FOLDERS: tuple[str, ...] = (
    "application support",
    "application scripts",
    "saved application state",
    "mobile documents",
    "my drive",
    "shared drives",
    "other computers",
    "google drive",
    "icloud drive",
    "user data",
    "my documents",
    "my music",
    "my pictures",
    "my videos",
    "saved games",
    "3d objects",
    "start menu",
    "common files",
    "windows powershell",
    "microsoft vs code",
    "visual studio code",
    "box sync",
    "creative cloud files",
)
_ORG_WORD = _rep(_ch(r"[\w.&,'+-]"), 1, 40)
_SPACE = _rep(_alt(_enc(" "), _lit("\\ ")), 1, 3)
_ORG_PAREN = _alt(_ORG_WORD, _seq(_enc("("), _ORG_WORD, _enc(")")))
_INNER = _seq(
    _alt(
        *[_folder_name(w) for w in INNER_FOLDERS],
        # OneDrive - Contoso Ltd, Dropbox (Contoso), Visual Studio 2022
        # (an org of up to nine words: "The University of Texas at Austin", "Contoso (EU)")
        _seq(_folder_name("onedrive - "), _ORG_WORD, _rep(_seq(_SPACE, _ORG_PAREN), 0, 8)),
        _seq(_folder_name("dropbox ("), _ORG_WORD, _rep(_seq(_SPACE, _ORG_WORD), 0, 8), _enc(")")),
        _seq(_folder_name("visual studio "), _rep(_ch("[0-9]"), 4, 4)),
    ),
    _look(_alt(_PS, _WS)),
)
_INNER_FULL = re.compile(_INNER.full, re.IGNORECASE)
#: up to the end of the last separator (any spelling) before a position
_LAST_SEP = re.compile(
    r".*(?:%(?:25)?(?:2f|5c)|\\u00(?:2f|5c)"
    r"|&(?:amp;)?(?:#x2f;?|#47;?|sol;|#x5c;?|#92;?|bsol;)|[/\\])",
    re.IGNORECASE | re.DOTALL,
)
_INNER_PREFIX = re.compile(_INNER.prefix, re.IGNORECASE)
_ANY_SEP = _alt(_PS, _WS)


def _dotted(sep: _P) -> _P:
    """A separator, then doubled ones and ``.`` segments (``\\.\\``, ``/./``, ``//``)."""
    return _seq(sep, _rep(_alt(sep, _seq(_lit("."), sep)), 0, 3))


def _then_spacey(sep: _P, after: _P) -> _P:
    """``sep``, and the space-holding top folder after it when one follows (``.``
    segments before it), up to the separator after it (lookahead). The folder is tried
    with every spelling of ``sep`` before the bare separator is taken: an optional
    folder after an alternation would settle for its first spelling (``\\`` of
    ``\\u005c``) and end the path at the space."""
    return _alt(_seq(_dotted(sep), _SPACEY, _look(after)), sep)


#: a JSON escape of a non-ASCII character (``\u00e9``: a letter of a folder name in JSON
#: text written with ensure_ascii), never of a control character or a separator
_NON_ASCII_ESC = _seq(
    _lit("\\u"),
    _alt(_seq(_lit("00"), _ch("[89a-f]")), _seq(_lit("0"), _ch("[1-9a-f]")), _ch("[1-9a-f]")),
)

#: any other ``%NAME%`` then a backslash is a Windows folder variable (``%FOO%\\x``);
#: a letter first and three or more characters (``100%\\``, ``%s%\\n`` are no
#: variables), backslashes (or ``%5C``, ``\\u005c``) and not a JSON escape after them,
#: or a space-holding top folder after them (``%FOO%\\.\\Program Files\\``)
_ANY_PCT_VAR = _seq(
    _enc("%"),
    _ch("[a-z]"),
    _rep(_ch("[a-z0-9_]"), 2, 39),
    _opt(_seq(_enc("("), _lit("x86"), _enc(")"))),
    _enc("%"),
    _alt(
        # %FOO%\Program Files\...: the folder read whole (a JSON escape cannot follow)
        _seq(_dotted(_WS), _SPACEY, _look(_ANY_SEP)),
        _seq(
            _alt(
                _lit("\\u005c"),
                _rep(_BS, 1, 8),
                _lit("%5c"),
                _lit("%255c"),
                *[_lit(e) for e in _HTML_BACKSLASHES],
            ),
            # a letter, also a JSON-escaped one (%FOO%\\\u00e9quipe: ensure_ascii)
            _look(_alt(_ch(r'(?-i:[^nrtbfu"\\/\s])'), _NON_ASCII_ESC)),
        ),
    ),
)


#: an NT device name: a letter, then letters, digits, ``_``, ``-`` and braces
#: (``HarddiskVolume3``, ``Mup``, ``NTPNP_PCI0015``, ``NPF_{guid}``), either separator
_NT_DEVICE = _seq(_lit("device"), _ANY_SEP, _ch("[a-z]"), _rep(_ch("[a-z0-9_{}-]"), 0, 63))
#: a volume without a drive letter is a drive form too: its space-holding top folder is
#: read whole (``\\Device\\HarddiskVolume3\\Program Files\\``, as Process Explorer,
#: Sysmon and ETW print image paths; ``\\\\?\\Volume{guid}\\``, ``\\\\?\\GLOBALROOT\\Device\\...``)
_VOLUME_TOP = _seq(
    _alt(
        _seq(_opt(_seq(_lit("globalroot"), _ANY_SEP)), _NT_DEVICE),
        _seq(_lit("volume"), _enc("{"), _rep(_ch("[0-9a-f-]"), 36, 36), _enc("}")),
    ),
    _dotted(_ANY_SEP),
    _SPACEY,
    _look(_ANY_SEP),
)


#: a share's root is a volume's too (``\\\\srv\\C$\\Program Files\\``, an admin share;
#: ``\\\\?\\UNC\\srv\\share\\``): its space-holding top folder is read whole
_SHARE_TOP = _seq(
    _rep(_ch(r"[\w.$-]"), 1, 63),
    _WS,
    _rep(_ch(r"[\w.$-]"), 1, 80),
    _dotted(_WS),
    _SPACEY,
    _look(_ANY_SEP),
)


def _device_start() -> _P:
    """``\\\\?\\``, ``\\\\.\\``, ``\\??\\``, ``//?/`` (escaped or percent-encoded too), and the
    object manager's ``\\GLOBAL??\\`` (the directory ``\\??\\`` names)."""
    q = _enc("?")
    lead = _alt(_rep(_BS, 2, 8), _rep(_BS_ENC, 2, 2), _seq(_PS, _PS))
    return _seq(
        _alt(
            _seq(lead, _alt(q, _enc("."))),
            _seq(_alt(_rep(_BS, 1, 4), _BS_ENC), _opt(_lit("global")), q, q),
        ),
        _alt(_WS, _PS),
        # \\?\C:\Program Files\...: the drive's (or volume's) top folder read whole
        _alt(
            _seq(_ch("[a-z]"), _enc(":"), _dotted(_alt(_WS, _PS)), _SPACEY, _look(_alt(_WS, _PS))),
            _VOLUME_TOP,
            _seq(_lit("unc"), _WS, _SHARE_TOP),
            _look(_ch(r"[\w{%]")),
        ),
    )


def _cfg_start(cfg_roots: tuple[str, ...]) -> _P:
    """A configured root or mount prefix (also behind the firmlink/proc aliases)."""
    cfg = _alt(*[_segments(r) for r in cfg_roots])
    return _group("cfg", _seq(_PSEPS, _opt(_seq(_ALIAS_START, _PSEPS)), cfg, _root_end()))


#: a drive (C:/, /c/, /cygdrive/c/, /mnt/c/) and its space-holding top folder, read
#: whole after a URI (file:///C:/Program Files/..., <scheme>://file/C:/Program Files/...)
_DRIVE_TOP = _seq(
    _alt(
        _seq(_ch("[a-z]"), _COLON, _dotted(_ANY_SEP)),
        _seq(_opt(_seq(_alt(_lit("cygdrive"), _lit("mnt")), _PSEPS)), _ch("[a-z]"), _PSEPS),
    ),
    _SPACEY,
    _look(_ANY_SEP),
)
#: what follows ``//file`` or a remote authority: a separator (or a drive's top folder)
_FILE_TAIL = _alt(_seq(_PS, _opt(_PS), _DRIVE_TOP), _look(_PS))


def _remote_start(schemes: _P) -> _P:
    """``vscode-remote://ssh-remote+host/abs/path``: a file on the (remote) machine;
    also ``cursor-remote://``, ``vscode-insiders-remote://``... and the URL form
    ``vscode://vscode-remote/ssh-remote+host/abs/path``."""
    return _seq(
        _alt(
            _seq(_alt(*[_lit(r) for r in REMOTE_SCHEMES]), _COLON, _PS, _PS),
            _seq(schemes, _COLON, _PS, _PS, _lit(REMOTE_SCHEME), _PS),
        ),
        # the authority: ssh-remote+user@host:22, wsl+Ubuntu, ssh-remote+[::1]:22
        _lazy(_rep(_ch(r"[\w.+@%:\[\]-]"), 1, 100)),
        _FILE_TAIL,
    )


def _file_start() -> _P:
    """``file:`` + separator; before a drive (``file:///C:/``, also with the local host
    named: ``file://localhost/C:/``) its space-holding top folder is read whole."""
    host = _opt(_seq(_lit("localhost"), _PS))
    # the legacy drive C| (RFC 8089, appendix E): its | is no stop there
    legacy = _seq(_ch("[a-z]"), _alt(_lit("|"), _lit("%7c")), _look(_ANY_SEP))
    return _group(
        "file",
        _seq(
            _lit("file"), _COLON, _PS, _opt(_seq(_rep(_PS, 0, 3), host, _alt(_DRIVE_TOP, legacy)))
        ),
    )


#: ``~``, percent-encoded, and the HTML references a renderer shows as one (like
#: :data:`_HTML_SLASHES`)
_TILDE = _alt(
    _lit("~"),
    # percent-encoded (?path=%7Ealice%2Fx: a query parameter holding ~alice/x)
    _lit("%7e"),
    _lit("%257e"),
    *[_lit(a + r) for a in ("&", "&amp;") for r in ("#126;", "#x7e;")],
    _bare_ref("&#x7e", "&#126"),
)


#: the drive forms of a POSIX shell on Windows
_POSIX_DRIVES = _alt(
    # /cygdrive/c/Program Files/..., WSL /mnt/c/Program Files (x86)/...: before
    # the plain /mnt root, which would end the start at the drive letter
    _seq(_alt(_lit("cygdrive"), _lit("mnt")), _PSEPS, _ch("[a-z]"), _PSEPS, _SPACEY),
    # Cygwin /cygdrive/c/..., Git Bash / MSYS /c/Users/...
    _seq(_lit("cygdrive"), _PSEPS, _ch("[a-z]")),
    _seq(_ch("[a-z]"), _PSEPS, _alt(*[_folder_name(w) for w in WIN_TOP_FOLDERS])),
)


def _unc_start() -> _P:
    """``\\\\server\\share`` (separators in any spelling), or a share's root with its
    space-holding top folder (:data:`_SHARE_TOP`)."""
    lead = _alt(_rep(_BS, 2, 8), _rep(_BS_ENC, 2, 2))
    # a share's name may start with a JSON-escaped letter (``\u00e9quipe``: JSON text
    # written with ensure_ascii; found by the soak with HTML-encoded separators)
    share = _look(_alt(_ch(r"[\w.$%-]"), _seq(_lit("\\u"), _ch("[0-9a-f]"))))
    # so may the host's, escaped once or twice (\\\\\\u00e9quipe)
    host = _opt(_seq(_rep(_BS, 0, 1), _NON_ASCII_ESC))
    return _seq(lead, _alt(_SHARE_TOP, _seq(host, _rep(_ch(r"[\w.$-]"), 1, 63), _WS, share)))


def _start_grammar(cfg_roots: tuple[str, ...]) -> list[_P]:
    """Every start form, one named alternative per family (longest and most
    specific first: a configured root before the default roots)."""
    any_sep, file_tail = _ANY_SEP, _FILE_TAIL
    roots = _alt(*[_segments(r) for r in DEFAULT_ROOT_NAMES])
    user = _seq(_ch("[a-z_]"), _rep(_ch(r"[\w.-]"), 0, 31))
    # every separator but a plain // (a URL host follows it); the escaped ones before a bare
    # backslash (C:\u002fx is C:/x, not C:\ and a folder u002fx)
    drive_sep = _alt(_BS_ENC, *_PS_ENC, _seq(_lit("/"), _look(_ch("[^/]"))), _rep(_BS, 1, 8))
    schemes = _alt(*[_lit(s) for s in EDITOR_SCHEMES])
    alts = []
    if cfg_roots:
        alts.append(_cfg_start(cfg_roots))
    return [
        *alts,
        # a default root may be followed by a Windows separator: /home\\bob\\x (mixed),
        # not by a JSON escape (line\\n/home\\nmore is /home alone, then a newline)
        _group(
            "posix",
            _seq(
                _PSEPS,
                _alt(
                    # a drive form is a Windows path: any backslash after it (\repos)
                    _seq(_POSIX_DRIVES, _look(any_sep)),
                    _seq(
                        _alt(_ALIAS_START, roots),
                        _look(
                            _alt(
                                _PS,
                                _seq(_WS, _alt(_ch(r'(?-i:[^nrtu"\\\\/\s])'), _NON_ASCII_ESC)),
                            )
                        ),
                    ),
                ),
            ),
        ),
        _group("uri", _seq(_PS, _PS, _lit("file"), file_tail)),
        _group("device", _device_start()),
        _group("unc", _unc_start()),
        _group("drive", _seq(_ch("[a-z]"), _COLON, _then_spacey(drive_sep, any_sep))),
        # \\Users\\bob: no drive; NT namespace paths \\Device\\<name>\\..., \\SystemRoot\\...
        _group(
            "winroot",
            _seq(
                _WS,
                _alt(
                    # a volume's space-holding top folder: \\Device\\HarddiskVolume3\\Program Files
                    _VOLUME_TOP,
                    _seq(
                        # any NT device: HarddiskVolume3, HarddiskVolumeShadowCopy1, Mup,
                        # CdRom0, NTPNP_PCI0015, NPF_{guid}; \\Device/... (either separator)
                        _alt(_lit("users"), _lit("systemroot"), _NT_DEVICE),
                        _look(any_sep),
                    ),
                ),
            ),
        ),
        # ~/x, also HTML-encoded (&#126;/x, &#x7E;&#x2F;x; not &tilde;: that is U+02DC),
        # escaped twice (&amp;#126;) or without its ; where no digit follows (&#126/x)
        _group("tilde", _seq(_TILDE, _opt(user), _alt(_PS, _WS))),
        # "$HOME"/x: the shell's quoted variable (the closing quote is given back)
        _group(
            "var",
            _alt(
                _seq(_var_start(), _opt(_lit('"')), _then_spacey(any_sep, any_sep)),
                _ANY_PCT_VAR,
            ),
        ),
        # file:///C:/Program Files/...: the drive's top folder read whole
        _file_start(),
        _group("deeplink", _seq(schemes, _COLON, _PS, _PS, _lit("file"), file_tail)),
        _group("remote", _remote_start(schemes)),
    ]


#: a letters-only fragment is a prefix of a start iff it is one letter (a drive)
#: or a prefix of one of these
_LETTER_PREFIXES = frozenset(
    w[:i] for w in ("file", *REMOTE_SCHEMES, *EDITOR_SCHEMES) for i in range(2, len(w) + 1)
)
#: characters a start may begin with: the triggers and (for C:, file:, vscode:) letters
_FIRST_CHARS = "/~\\:%$&abcdefghijklmnopqrstuvwxyz"


def _by_first_char(
    alts: list[_P],
) -> tuple[dict[str, _Matcher], dict[str, _Matcher]]:
    """START and PREFIX matchers per first character, each trying only the alternatives
    that can begin with it (so a failing match costs little). Every alternative is
    compiled once, not once per character set it is in: the combined regexes were
    ≈ 650,000 characters of pattern, 3 s and 14 MiB per process; these are 240,000."""
    compiled = [
        (re.compile(a.full, re.IGNORECASE), re.compile(a.prefix, re.IGNORECASE)) for a in alts
    ]
    start: dict[str, _Matcher] = {}
    prefix: dict[str, _Matcher] = {}
    chains: dict[tuple[int, ...], tuple[_Matcher, _Matcher]] = {}
    for ch in _FIRST_CHARS:
        mine = tuple(i for i, (_, pre) in enumerate(compiled) if pre.fullmatch(ch))
        if not mine:
            continue
        if mine not in chains:
            chains[mine] = (
                _chain(tuple(compiled[i][0] for i in mine)),
                _chain(tuple(compiled[i][1] for i in mine)),
            )
        for c in {ch, ch.upper()}:
            start[c], prefix[c] = chains[mine]
    return start, prefix


class _Chain:
    """Start regexes tried in order at one position: what their alternation would match
    (each alternative is self-contained, and an alternation takes the first alternative
    that matches), compiled apart so that each is compiled once per process."""

    __slots__ = ("patterns",)

    def __init__(self, patterns: tuple[re.Pattern[str], ...]) -> None:
        self.patterns = patterns

    def match(self, s: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        for p in self.patterns:
            m = p.match(s, pos, endpos)
            if m is not None:
                return m
        return None

    def fullmatch(self, s: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        for p in self.patterns:
            m = p.fullmatch(s, pos, endpos)
            if m is not None:
                return m
        return None


_Matcher = re.Pattern[str] | _Chain


def _chain(patterns: tuple[re.Pattern[str], ...]) -> _Matcher:
    return patterns[0] if len(patterns) == 1 else _Chain(patterns)


def _patterns_of(m: _Matcher) -> tuple[re.Pattern[str], ...]:
    return m.patterns if isinstance(m, _Chain) else (m,)


@functools.lru_cache(maxsize=1)
def _default_patterns() -> tuple[list[_P], dict[str, _Matcher], dict[str, _Matcher]]:
    alts = _start_grammar(())
    return (alts, *_by_first_char(alts))


def _start_patterns(
    cfg_roots: tuple[str, ...],
) -> tuple[list[_P], dict[str, _Matcher], dict[str, _Matcher]]:
    """The start grammar's alternatives and its START/PREFIX matchers per first
    character: the configured roots' own patterns tried before the default ones."""
    alts, start, prefix = _default_patterns()
    if not cfg_roots:
        return alts, dict(start), dict(prefix)
    cfg = _cfg_start(cfg_roots)
    cfg_start, cfg_prefix = _by_first_char([cfg])

    def merged(mine: dict[str, _Matcher], rest: dict[str, _Matcher]) -> dict[str, _Matcher]:
        out: dict[str, _Matcher] = dict(rest)
        for c, m in mine.items():
            out[c] = _chain(_patterns_of(m) + _patterns_of(rest[c])) if c in rest else m
        return out

    return [cfg, *alts], merged(cfg_start, start), merged(cfg_prefix, prefix)


# --- spelling: how a path is written, where it ends ------------------------------

_TRIGGER = re.compile(r"[/~\\:%$&]")
_OPENERS = "([{"
_BRACKETS = "([{)]}"
_CLOSER_OF = {")": "(", "]": "[", "}": "{"}
_TRAILING_PUNCT = ".,;:!?"
_QUOTE_CLOSERS = {"`": "`", '"': '"', "'": "'", "<": ">"}
#: typographic and CJK quotes hold spaces as ASCII ones do (French, German, Chinese and
#: Japanese prose quote paths so: « /Users/John Smith/x », „…“, 「…」)
_QUOTE_CLOSERS |= {"“": "”", "‘": "’", "«": "»", "‹": "›", "„": "“", "「": "」", "『": "』"}
_TYPO_CLOSERS = "”’»›“」』"
#: a file name's extension, then words of a sentence (“/tmp/a.txt is mine”), not a
#: folder with a dot in its name (“/Users/a/my.notes folder/x.txt”)
#: a closing ``'``: not one between letters (``O'Brien``) nor one of the shell's ways
#: to write an apostrophe inside single quotes (``'\\''``, ``'"'"'``)
_SQ_CLOSER = r"""(?<!\\)(?<!")'(?![^\W_]|\\''|"'"')"""
#: the text after a closing ``'`` at a buffer's end that could still make it none
_SQ_UNDECIDED = re.compile(r"""|\\'?|"(?:'"?)?""")
_EXT_SPACE = re.compile(r"(\.[A-Za-z][A-Za-z0-9]{0,7})\s+[^\s/\\]+\s")
_NOT_BOUNDARY = frozenset("/\\.~")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")
_HEX = frozenset("0123456789abcdefABCDEF")
#: a JSON escape that ends a path (odd backslash run, then ``" n r t b f``)
#: a JSON escape that ends a path: a control character, a quote, or (ensure_ascii text) the
#: escape of a character that is a stop itself (quotes, ``<>``, a backtick, ``«»``, ``“”``,
#: ``‘’``, ``「」『』``)
_ESC_END = (
    r'(?<!\\)(?:\\\\)*\\(?=["nrtbf]|u00[01][0-9a-fA-F]'
    r"|u(?:00(?:22|27|3[cCeE]|60|[aAbB][bB])|201[89cCdD]|300[c-fC-F]))"
)
#: a plain Windows path: ``\\`` is a separator, never an escape
_STOP_WIN = re.compile(_STOP_CLASS)
#: JSON-escaped paths: also JSON escapes (``\\n``, ``\\"``...)
_STOP_ESC = re.compile(rf"{_STOP_CLASS}|{_ESC_END}")
#: plain POSIX paths: JSON escapes too, but a shell-escaped stop (``\\ ``, not
#: ``\\\\ ``) continues the path, and so does a shell-escaped space in JSON text
#: (``"cat My\\\\ Drive/x"``: tool arguments): two backslashes, then a space
_STOP_SHELL = re.compile(
    rf"(?<!(?<!\\)\\)(?<!(?<!\\)\\\\){_STOP_CLASS}"
    rf"|(?<=(?<!\\)\\\\)(?![ '()\[\]{{}}]){_STOP_CLASS}|{_ESC_END}"
)
#: JSON-escaped POSIX paths (``\\/Users\\/a\\/My\\\\ Drive``, PHP's ``json_encode``): JSON
#: escapes end them, a shell escape written in JSON (two backslashes) continues them
_STOP_ESC_SHELL = re.compile(
    rf"(?<!(?<!\\)\\\\){_STOP_CLASS}"
    rf"|(?<=(?<!\\)\\\\)(?![ '()\[\]{{}}]){_STOP_CLASS}|{_ESC_END}"
)
#: percent-encoded paths: also the URL delimiters
_STOP_PCT = re.compile(rf"{_STOP_CLASS}|[&#?=]|{_ESC_END}")
#: an HTML separator reference (see :data:`_HTML_SLASHES`; also without its ``;``)
_HTML_SEP_RE = (
    r"&(?:amp;)?(?:#x2f;|#47;|sol;|#x5c;|#92;|bsol;)"
    r"|&#x2f(?![0-9a-f;])|&#47(?![0-9;])|&#x5c(?![0-9a-f;])|&#92(?![0-9;])"
)
_SEPARATORS = re.compile(
    r"(?:\\u00(?:2[fF]|5[cC])|%(?:25)?(?:2[fF]|5[cC])|[/\\]|(?i:" + _HTML_SEP_RE + "))+"
)
_DUP_SEP = re.compile(r"/(?:\.?/)+")
_DUP_WIN_SEP = re.compile(r"\\(?:\.?\\)+")
_DRIVE = re.compile(r"/?[A-Za-z]:[\\/]")
_BACKSLASHES = re.compile(r"\\+")
_JSON_U = re.compile(r"\\u[0-9a-fA-F]{4}")
#: a JSON escape that can sit inside a path in JSON text; not ``\b`` ``\t``...: they
#: would be control characters in a file name (in prose ``a\b.txt`` is a name)
_JSON_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/])')
_TILDE_HEAD = re.compile(r"~[^/\\]*")
#: ``~`` then a separator (a generic anchor, unlike ``~user/``)
_TILDE_ALONE = re.compile(r"(?:~|%(?:25)?7e|(?:&amp;)?&#(?:126|x7e);?)[/\\%&]", re.IGNORECASE)
_NON_SEPARATOR = re.compile(r"[^/\\.]")
_EMPTY_BODY = re.compile(rf"(?:{_PS.full}|{_WS.full}|\.)*", re.IGNORECASE)
_SECOND_START = re.compile(r"\s(?=[/~\\%$&]|[a-z][a-z-]*(?::|%3a))", re.IGNORECASE)
_SHELL_ESC = re.compile(r"\\([ ()\[\]{}'&;!$*?|<>`#=,\\])")
_JSON_ESC = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))", re.DOTALL)
_JSON_CHARS = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_LINE_COL = re.compile(r"(?::\d+){1,2}\Z")
_ALIAS = re.compile(r"/(?:system/volumes/data|proc/(?:\d+|self|thread-self)/root)(?=/|\Z)", re.I)
_VAR_HEAD = re.compile(
    r"%homedrive%%homepath%|\$\{(?:env:)?(\w+)(?::?[-=][^}]*)?\}|\$(?:env:)?(\w+)|%([\w()]+)%", re.I
)
#: a segment right below one of these (or ``run/user``) is a user name, also when the
#: folder is longer (a path that ran into another one)
_USER_PARENT_NAMES = frozenset({"users", "home", "media", "documents and settings"})
_USER_PARENT_LENS = frozenset({4, 5, 22})
_WIN_START = frozenset({"drive", "unc", "device", "winroot"})
_WIN_BODY_FAMILIES = frozenset({"file", "deeplink", "uri", "posix"})
_SP = r"(?: |%(?:25)?20|\\ ){1,3}"
_SPACEY_TAIL = re.compile(
    rf"(?:program{_SP}files(?:{_SP}(?:\(|%(?:25)?28)x86(?:\)|%(?:25)?29))?"
    rf"|documents{_SP}and{_SP}settings)\Z"
)
#: a ``file:`` URI, an editor deep link or a Git Bash / Cygwin / WSL path whose body is a
#: drive (``file:///C:/``, ``vscode://file/C:\\``, ``/c/Users/``, ``/mnt/c/``) or a share
#: (``file://srv\\share``): a Windows path, its ``\\`` a separator, never an escape
#: (``vscode://file/C:\\Users\\bob\\repos``: ``\\r`` is no JSON escape). It reads no
#: further than the start's own prefix or the first separator (chunk independence)
_WIN_BODY = re.compile(
    r"(?:file:/*(?:localhost/)?|(?:[a-z][\w+.-]*:)?//file/+)"
    # a drive (also C%3A, VS Code's Uri.toString(), and the legacy C|), a share
    # (vscode://file/\\\\srv\\share), a Git Bash / Cygwin / WSL drive (file:///c/Users/)
    r"(?:[a-z](?::|%3a|%253a|\||%7c)[\\/]|\\{2,8}[\w.$-]+\\"
    r"|(?:(?:cygdrive|mnt)/)?[a-z]/(?:users|windows|program|documents|programdata)[\\/ %])"
    r"|file://[\w.$-]+\\"
    # a Git Bash / Cygwin / WSL drive, after doubled separators and "." segments as the
    # start reads them (//cygdrive/c/, /./c/, /mnt//c/: x//c/Users/bob\build, where \b
    # read as an escape ended the path and showed the folders after it)
    r"|/(?:\.?/){0,6}(?:(?:cygdrive|mnt)/(?:\.?/){0,6})?[a-z][\\/]",
    re.IGNORECASE,
)
_RUN_BEFORE_U = re.compile(r"(\\+)u00")
_PCT1 = re.compile("%(?:2f|5c|3a|24|7e)")
_PCT2 = re.compile("%25(?:2f|5c|3a|24|7e)")


class _Spelling(NamedTuple):
    win: bool  #: backslash is a separator (Windows), never an escape, when json == 0
    json: int
    pct: int
    stop: re.Pattern[str]
    quote_end: dict[str, re.Pattern[str]]
    html: bool = False  #: separators are HTML character references (``&#x2F;``)
    #: in a JSON-text channel: a trailing backslash before ``"`` is the quote's escape
    json_text: bool = False


def _quote_ends(esc: bool) -> dict[str, re.Pattern[str]]:
    """Closer searches: group 1 is the closer; a line end (also ``\\n``) comes first.

    With JSON escapes a ``"`` closes only with the opener's own escaping: after
    ``"`` an unescaped ``"``, after ``\\"`` a ``\\"`` (``\\"`` inside ``"..."`` is
    part of the path)."""
    if not esc:
        ends = {c: re.compile(f"({re.escape(c)})|[\r\n]") for c in "`\"'>)]" + _TYPO_CLOSERS}
        ends["'"] = re.compile(rf"({_SQ_CLOSER})|[\r\n]")
        return ends
    line_end = r"|[\r\n]|(?<!\\)(?:\\\\)*\\(?=[nr])"
    ends = {c: re.compile(f"({re.escape(c)}){line_end}") for c in "`'>" + _TYPO_CLOSERS}
    ends["'"] = re.compile(rf"({_SQ_CLOSER}){line_end}")
    # a markdown link target or link text: a backslash-escaped bracket is the path's
    # (CommonMark: [x](/Users/a/a\\(1\\)/n)), a bracket after \\\\ closes it
    for c in ")]":
        ends[c] = re.compile(rf"((?<!(?<!\\)\\){re.escape(c)}){line_end}")
    ends['"'] = re.compile(rf'((?<!\\)(?:\\\\)*"){line_end}')
    ends['\\"'] = re.compile(rf'((?<!\\)\\(?:\\\\)*"){line_end}')
    return ends


@functools.lru_cache(maxsize=64)
def _spelling(win: bool, json: int, pct: int, html: bool = False) -> _Spelling:
    if pct:
        stop = _STOP_PCT
    elif win and json == 0:
        stop = _STOP_WIN
    else:
        stop = _STOP_SHELL if not json else _STOP_ESC_SHELL if json == 1 and not win else _STOP_ESC
    return _Spelling(win, json, pct, stop, _quote_ends(stop is not _STOP_WIN), html)


#: a Git Bash / Cygwin / WSL drive path (``/c/Users/bob\\x``): Windows separators, and
#: a shell-escaped stop (``My\\ Files``) continues it, as in a plain POSIX path
_GIT_BASH = _spelling(True, 0, 0)._replace(
    stop=re.compile(_STOP_SHELL.pattern.removesuffix(f"|{_ESC_END}"))
)


@functools.lru_cache(maxsize=1024)
def _spelling_of(family: str, start: str) -> _Spelling:
    """Spelling from the start's text: its separators say how the path is encoded."""
    low = start.lower()
    tail = _SPACEY_TAIL.search(low)
    if tail is not None:  # %SystemDrive%\\Program Files: the separator before it counts
        low = low[: tail.start()]
    pct = 2 if _PCT2.search(low) else 1 if _PCT1.search(low) else 0
    runs = [len(r) for r in re.findall(r"\\+", start.replace("\\u00", "u00"))]
    # a home, a variable or a POSIX root followed by a backslash: Windows separators
    # (/home\\bob\\x is a mixed spelling: there \\b is a separator, not an escape)
    win = family in _WIN_START or (
        family in ("tilde", "var", "posix", "cfg")
        and (low.endswith(("\\", "%5c", "\\u005c", "&#x5c", "&#92", *_HTML_BACKSLASHES)))
        and "\\/" not in low
    )
    if "\\u00" in low:
        # an odd run of backslashes before u00 is one level (\\\\\\u00e9: a backslash and
        # an escaped letter), an even one two (\\\\u00e9: escaped twice)
        run = _RUN_BEFORE_U.search(low)
        json = 1 if run is None or len(run.group(1)) % 2 else 2
    elif not win:
        json = 2 if "\\\\/" in start else 1 if "\\/" in start else 0
    elif not runs:
        json = 0
    else:
        # a \\server or \\?\ lead is two backslashes at level 0; \??\ and C:\ have one
        double = family in ("unc", "device") and "??" not in start
        lead = runs[0] if family in ("unc", "device") else runs[-1]
        json = min(2, max(0, lead.bit_length() - (2 if double else 1)))
    if pct and win and json == 0 and start.endswith("\\"):
        # %7E\\bob\\repos, C%3A\\Users\\bob: percent-encoded, then plain Windows
        # separators (\\b is a separator there, not an escape)
        return _PCT_WIN[pct - 1]
    return _spelling(win, json, pct, "&" in start)


#: A Windows path in JSON text (``"type \\"C:/x/a.txt\\""``: tool arguments): a
#: backslash before ``"`` is the quote's escape, not a separator (the JSON would break).
#: Any other single backslash stays a separator: valid JSON writes one as ``\\\\`` (a
#: JSON level), so a single one is sloppy text that may hold folders (``\\repos``)
_IN_JSON_TEXT: dict[tuple[object, ...], _Spelling] = {}


def _in_json_text_channel(sp: _Spelling) -> _Spelling:
    """``sp`` in a JSON-text channel: ``\\"`` closes a ``"`` too, and a backslash
    before a quote is given back (the escape's, not a separator)."""
    key = (sp.win, sp.json, sp.pct, sp.html, sp.stop.pattern)
    got = _IN_JSON_TEXT.get(key)
    if got is None:
        esc = "(?=[nr])" in sp.quote_end["`"].pattern
        line_end = r"|[\r\n]|(?<!\\)(?:\\\\)*\\(?=[nr])" if esc else r"|[\r\n]"
        closer = re.compile(rf'((?<!\\)(?:\\\\)*\\?"){line_end}')
        ends = {**sp.quote_end, '"': closer, '\\"': closer}
        got = _IN_JSON_TEXT[key] = sp._replace(quote_end=ends, json_text=True)
    return got


_STOP_PCT_WIN = re.compile(rf"{_STOP_CLASS}|[&#?=]")
_PCT_WIN = tuple(_spelling(True, 0, p)._replace(stop=_STOP_PCT_WIN) for p in (1, 2))


def _json_unescape(s: str) -> str:
    if "\\" not in s:
        return s

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return _JSON_CHARS.get(m.group(2), m.group())  # not an escape: kept as written

    out = _JSON_ESC.sub(one, s)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in out):  # pairs joined, lone ones replaced
        out = out.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return out


def json_escape(s: str) -> str:
    """Escape ``s`` for the inside of a JSON string (quotes, backslashes, controls)."""
    if not any(c in '"\\' or c < " " for c in s):
        return s
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c < " ":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def could_contain_path(text: str) -> bool:
    """False when ``text`` cannot hold a path start (none of ``/ ~ \\ : % $ &``)."""
    return _TRIGGER.search(text) is not None


def _spaceless_script(ch: str) -> bool:
    """True for letters of scripts written without spaces (CJK, kana, Thai...)."""
    o = ord(ch)
    return (
        0x2E80 <= o <= 0x9FFF
        or 0xF900 <= o <= 0xFAFF
        or 0xFF00 <= o <= 0xFFEF
        or 0xAC00 <= o <= 0xD7AF
        or 0x0E00 <= o <= 0x0EFF
        or 0x1000 <= o <= 0x109F
        or 0x20000 <= o <= 0x3FFFF
    )


def is_boundary(ch: str) -> bool:
    """May a path start right after ``ch`` ("" means start of text)?"""
    if not ch:
        return True
    if ch in _NOT_BOUNDARY:
        return False
    if ch.isalnum():
        return _spaceless_script(ch)
    return True


#: a command-line flag glued to its value: ``-I/usr/x``, ``-LC:\\x``, ``--include/x``;
#: it counts where its ``-`` is at a boundary itself (whitespace, a quote, ``=``, an
#: opener, an escape sequence, ``~~``...), never inside a word (``x-I/home``)
_FLAG_BEFORE = re.compile(r"--?[A-Za-z]{1,16}\Z")
#: ESC raw or escaped (``\\u001b``, ``\\x1b``, ``\\X1B``, ``\\033``; up to two JSON levels)
_ESC_LEAD = r"(?:\x1b|\\{1,4}(?:u001[bB]|[xX]1[bB]|033))"
#: a CSI lead: ESC ``[``, also ``\\e[`` ``\\E[`` (shells) and ``^[[`` (caret
#: notation), the 8-bit CSI (``\x9b``, ``\\u009b``)
_CSI_LEAD = rf"(?:{_ESC_LEAD}\[|\\{{1,4}}[eE]\[|\^\[\[|\x9b|\\{{1,4}}u009[bB])"
#: an escape sequence ends a word: CSI (``ESC[1;34m``: params, intermediates, a final
#: byte) or ESC + intermediates + a final byte (``ESC(B`` of ``tput sgr0``, ``ESC7``)
_ESC_BEFORE = re.compile(
    rf"(?:{_CSI_LEAD}[0-?]{{0,16}}[ -/]{{0,2}}[@-~]|{_ESC_LEAD}[ -/]{{0,2}}[0-~])\Z"
)
#: a character every escape sequence spelling holds (cheap test before the regex)
_ESC_MARK = re.compile(r"[\x1b\x9b\\^]")


def _boundary_at(buf: str, k: int, flags: bool = True) -> bool:
    """May a path start at ``buf[k]``? Also after a JSON ``\\n`` or a ``%XX`` escape,
    an escape sequence (ANSI colours), markdown ``~~``, a glued command-line flag
    (``-I``) whose ``-`` is at a boundary (``flags``: not for that ``-`` itself)."""
    if k == 0:
        return True
    ch = buf[k - 1]
    if ch == "\\" and (buf[k] == "~" or buf.endswith("\\\\\\\\", 0, k)):
        # markdown escapes a tilde (\~/x renders as ~/x), and four backslashes or more
        # escape each other (the JSON spellings of one, two or three are starts of
        # their own): what follows them starts afresh
        return True
    if ch in _NOT_BOUNDARY:
        return ch == "~" and k >= 2 and buf[k - 2] == "~"  # ~~strikethrough~~
    if not ch.isalnum() or _spaceless_script(ch):
        return True
    if k >= 2 and buf[k - 2] == "\\" and ch in "nrtbf":
        return True
    if (
        k >= 3
        and ch in _HEX
        and buf[k - 2] in _HEX
        and (buf[k - 3] == "%" or (k >= 5 and buf[k - 5 : k - 2] == "%25"))
    ):
        return True
    if ch in _HEX and k >= 6 and buf[k - 6 : k - 4] == "\\u":
        # a JSON escape (ensure_ascii text): its character decides (\u201c/Users: a
        # quote, \u6587/Users: CJK are boundaries; \u00e9/Users, caf\u00e9, is not)
        code = buf[k - 4 : k]
        if all(c in _HEX for c in code):
            return is_boundary(chr(int(code, 16)))
    if ch >= "\x80":
        return False
    lo = max(0, k - 28)
    if _ESC_MARK.search(buf, lo, k) is not None and _ESC_BEFORE.search(buf, lo, k) is not None:
        return True
    if not flags or not ("a" <= ch <= "z" or "A" <= ch <= "Z"):
        return False
    lo = max(0, k - 18)
    if buf.find("-", lo, k) < 0:
        return False
    m = _FLAG_BEFORE.search(buf, lo, k)
    return m is not None and _boundary_at(buf, m.start(), False)


# --- normal form and names -------------------------------------------------------


def _canon_posix(p: str) -> str:
    if "//" in p or "/./" in p:
        p = _DUP_SEP.sub("/", p)
    if p.endswith("/."):
        p = p[:-2]
    if p.endswith("/"):
        p = p.rstrip("/") or "/"
    if p[1:2] in ("s", "S", "p", "P"):
        m = _ALIAS.match(p)
        if m is not None:
            p = p[m.end() :] or "/"
    return p


def _canon_win(p: str) -> str:
    """``C:/a//b\\.\\c\\`` -> ``C:\\a\\b\\c``; the drive letter upper case."""
    p = p.replace("/", "\\")
    p = _DUP_WIN_SEP.sub(lambda _: "\\", p)
    if p.endswith("\\."):
        p = p[:-2]
    if len(p) > 3:
        p = p.rstrip("\\")
    return p[:1].upper() + p[1:] if p[1:2] == ":" else p


def _canon_rest(rest: str, win: bool) -> str:
    """The part after an anchor (``~``, ``$HOME``): canonical, "" when empty."""
    if not rest:
        return ""
    rest = _canon_win("X:" + rest)[2:] if win else _canon_posix(rest)
    return "" if rest in ("/", "\\", "") else rest


def _unquote_uri(s: str) -> str:
    """Percent-decoded once, and once more when separators are still encoded
    (``file://localhost%252FUsers%252Fbob``: a URI encoded twice)."""
    s = unquote(s)
    return unquote(s) if "%" in s and _PCT1.search(s.lower()) else s


def _normal_file_uri(s: str, win: bool) -> str:
    rest = _unquote_uri(s[5:] if s[4:5] == ":" else s[4:])
    slashes = len(rest) - len(rest.lstrip("/"))
    body = rest.lstrip("/")
    if slashes == 2:
        host, sep, tail = body.partition("/")
        if host.lower() == "localhost":
            body = tail
        else:
            return "\\\\" + _canon_win(host + "\\" + tail) if sep else "\\\\" + host
    elif slashes >= 4:
        return "\\\\" + _canon_win(body)
    return _uri_body(body, win)


def _uri_body(body: str, win: bool) -> str:
    """The path a ``file:`` URI or a deep link names, from its first non-``/`` on: a
    drive (``C:``, the legacy ``C|``), a share (``\\\\srv\\share``) or a POSIX path
    (with Windows separators in a Windows body: ``/c/Users/bob\\x``)."""
    if body[1:2] == "|" and body[:1].isalpha():
        body = body[0] + ":" + body[2:]
    if _DRIVE.match(body):
        return _canon_win(body.lstrip("/"))
    if body[:2] == "\\\\":
        return "\\\\" + _canon_win(body.lstrip("\\"))
    return _canon_posix("/" + (body.replace("\\", "/") if win else body))


def _normal_deeplink(s: str, win: bool) -> str:
    s = _unquote_uri(s)
    rest = _LINE_COL.sub("", s[s.lower().find("//file") + 6 :])
    return _uri_body(rest.lstrip("/"), win)


def _normal_remote(s: str) -> str:
    """``vscode-remote://ssh-remote+host/home/x`` -> ``/home/x``."""
    s = unquote(s)
    rest = s[s.find("//") + 2 :]
    if rest[:14].lower() == REMOTE_SCHEME + "/":  # vscode://vscode-remote/<authority>/...
        rest = rest[14:]
    return _canon_posix(rest[rest.find("/") :])


_DEVICE_HEAD = re.compile(r"\\+[?.]\\+|\\+(?:global)?\?\?\\+", re.IGNORECASE)


def _normal_device(s: str) -> str:
    """``\\\\?\\C:\\x`` -> ``C:\\x``; ``\\\\?\\UNC\\srv\\share`` -> ``\\\\srv\\share``."""
    s = s.replace("/", "\\")
    m = _DEVICE_HEAD.match(s)
    head = m.group() if m is not None else ""
    rest = s[len(head) :]
    if rest[:4].lower() == "unc\\":
        return "\\\\" + _canon_win(rest[4:].lstrip("\\"))
    if re.match(r"[A-Za-z]:(?:\\|\Z)", rest):
        return _canon_win(rest)
    return "\\\\" + head.strip("\\") + "\\" + _canon_win(rest)


def _normal_var(s: str, win: bool) -> str:
    m = _VAR_HEAD.match(s)
    if m is None:  # the variable's own braces percent-encoded: ``$%7BHOME%7D/x``
        s = unquote(s)
        m = _VAR_HEAD.match(s)
    if m is None:  # a head the start took but this does not read: as written
        return _canon_rest(s, win)
    name = (m.group(1) or m.group(2) or m.group(3) or "homepath").lower()
    head = "~" if name in HOME_VARS else "C:" if name == "homedrive" else m.group()
    rest = s[m.end() :]
    rest = _canon_rest(rest[1:] if rest[:1] == '"' else rest, win)
    if head == "C:":
        return _canon_win("C:" + (rest or "\\"))
    return head + rest


def file_name(path: str) -> str:
    """The file name alone: last segment; a per-user directory itself becomes ``~``."""
    trimmed = path.rstrip("/\\") or path
    if "\\" in trimmed:
        cut = max(trimmed.rfind("/"), trimmed.rfind("\\"))
        folder, name = trimmed[:cut].rstrip("/\\"), trimmed[cut + 1 :]
        parent = folder[max(folder.rfind("/"), folder.rfind("\\")) + 1 :]
    else:
        folder, _, name = trimmed.rpartition("/")
        parent = folder[folder.rfind("/") + 1 :]
    if not folder:
        if name.startswith("~") or (name.lower() == "root" and trimmed[:1] == "/"):
            return "~"
    elif len(parent) in _USER_PARENT_LENS or "  " in parent:  # Documents  and Settings
        low = " ".join(parent.lower().split())
        if low in _USER_PARENT_NAMES or (low == "user" and folder[-9:-5].lower() == "/run"):
            return "~"
    return name or "~"


def _trim_end(raw: str, before: str) -> str:
    """Give trailing sentence punctuation back; after ``_`` also the closing ``_``
    of markdown emphasis (``_/tmp/x.txt_``), after ``~`` (``~~``) the closing ``~~``
    of a strikethrough."""
    raw = raw.rstrip(_TRAILING_PUNCT)
    if before == "_" and raw.endswith("_"):
        raw = raw[:-1].rstrip(_TRAILING_PUNCT)
    elif before == "~" and raw.endswith("~~"):
        raw = raw[:-2].rstrip(_TRAILING_PUNCT)
    return raw


def _opener_before(buf: str, start: int) -> str:
    """The character before the path, or before the flag glued to it (``~~-L/x~~``)."""
    if not start:
        return ""
    ch = buf[start - 1]
    if "a" <= ch <= "z" or "A" <= ch <= "Z":
        m = _FLAG_BEFORE.search(buf, max(0, start - 18), start)
        if m is not None and m.start():
            return buf[m.start() - 1]
    return ch


_HTML_SEP = re.compile(_HTML_SEP_RE, re.IGNORECASE)
#: a separator still encoded in a name (a spelling that changed inside the path)
_ENCODED_SEP = re.compile(r"%(?:25)*(?:2f|5c)|" + _HTML_SEP_RE, re.IGNORECASE)


def _after_encoded_separator(name: str) -> str:
    """What follows the last separator still encoded in ``name`` (the folders before it
    must not reach the client); the last non-empty part when it ends with one."""
    parts = [p for p in _ENCODED_SEP.split(name) if p]
    return parts[-1] if parts else name


_ENTITY_CUT = re.compile(r"&(?:amp;)?(?:#x2f|#47|sol|#x5c|#92|bsol)\Z", re.IGNORECASE)


def _entity_end(buf: str, start: int, raw: str) -> str:
    """The ``;`` of a trailing HTML separator (``&#47;``) is not sentence punctuation."""
    end = start + len(raw)
    if buf[end : end + 1] == ";" and _ENTITY_CUT.search(raw):
        return raw + ";"
    return raw


def _in_json_text(raw: str, family: str, sp: _Spelling) -> bool:
    """A plain path with a JSON escape in it (``\\u00e9``, ``\\"``) sits in JSON text."""
    if not sp.win:
        return _JSON_ESCAPE.search(raw) is not None
    if family == "unc":  # \\Users\\bob\\x: every separator doubled, so JSON-escaped
        runs = _BACKSLASHES.findall(_JSON_U.sub("", raw[2:]))
        return bool(runs) and all(len(r) % 2 == 0 for r in runs)
    if family in _WIN_BODY_FAMILIES:  # file:///C:/x/\u00e9.txt: \u escapes, no separator
        return _JSON_U.search(raw) is not None and "\\" not in _JSON_U.sub("", raw)
    return raw[2:3] == "/" and family == "drive" and _JSON_U.search(raw) is not None


def _read_on(
    buf: str, lo: int, m: re.Match[str], stop: re.Pattern[str], limit: int, final: bool
) -> int:
    """A space or an apostrophe that would end a prose path: where the path reads on
    (0: it ends there, -1: the buffer ends before that is decided)."""
    e = m.start()
    if m.group() != "'":
        return _inner_folder(buf, lo, e, limit, final)
    # O'Brien/x: an apostrophe between letters inside a folder name (a separator
    # follows before the next stop); report.pdf's size ends at it
    n = len(buf)
    if not (e and buf[e - 1].isalnum()) or (e + 1 < n and not buf[e + 1].isalnum()):
        return 0
    nxt = stop.search(buf, e + 1)
    while nxt is not None and nxt.group() == "'" and buf[nxt.start() - 1].isalnum():
        i = nxt.start()  # rock'n'roll/: another apostrophe between letters
        if i + 1 == n:
            if not final:
                return -1
            break
        if not buf[i + 1].isalnum():
            break
        nxt = stop.search(buf, i + 1)
    end = nxt.start() if nxt is not None else n
    if end > limit:
        return 0
    if nxt is None and not final:
        return -1
    seg = buf[e + 1 : end]
    return e + 1 if "/" in seg or "\\" in seg else 0


def _inner_folder(buf: str, lo: int, e: int, limit: int, final: bool) -> int:
    """At a space ``buf[e]`` that would end a prose path: where the path reads on when
    the segment holding it is a known space-holding folder (:data:`INNER_FOLDERS`),
    0 when the space ends the path, -1 when the buffer ends inside such a name.

    Decided on the text only: the segment starts after the last separator in
    ``buf[lo:e]`` (``lo``: the body, or the end of the last name read on), and a name
    that could run past ``limit`` is never looked for (chunk independence)."""
    last = _LAST_SEP.match(buf, lo, e)
    seg = last.end() if last is not None else lo
    if seg + _INNER.maxlen > limit:
        return 0
    m = _INNER_FULL.match(buf, seg)
    if m is not None and m.end() > e:
        return m.end()
    if not final and _INNER_PREFIX.fullmatch(buf, seg) is not None:
        return -1
    return 0


_OPEN_PAREN = re.compile(r"(?<!\\)\(")


def _balanced_closer(
    buf: str, start: int, m: re.Match[str], ends: re.Pattern[str]
) -> re.Match[str] | None:
    """A markdown link target holds balanced parentheses (CommonMark:
    ``[x](/a/Dropbox (Contoso)/b)``): the ``)`` that closes it is the first one no
    ``(`` after ``start`` is waiting for. None: the buffer ends first."""
    depth = len(_OPEN_PAREN.findall(buf, start, m.start()))
    while depth > 0:
        nxt = ends.search(buf, m.end())
        if nxt is None or nxt.group(1) is None:
            return nxt
        depth += len(_OPEN_PAREN.findall(buf, m.end(), nxt.start())) - 1
        m = nxt
    return m


def _give_back(raw: str, sp: _Spelling) -> str:
    """A trailing backslash that starts an escape (``\\"``) is not part of the path."""
    if sp.json_text:
        return raw.rstrip("\\")
    if raw[-1:] != "\\" or (sp.win and sp.json == 0):
        return raw
    run = len(raw) - len(raw.rstrip("\\"))
    keep = run - run % (1 << sp.json) if sp.win else 0
    return raw[: len(raw) - run + keep]


# --- results ----------------------------------------------------------------


class Found(NamedTuple):
    """A path at ``buf[start:end]``."""

    start: int
    end: int
    match: PathMatch


class NeedMore(NamedTuple):
    """Text from ``start`` may be a path; decide when more text (or the end) arrives."""

    start: int


class Overlong(NamedTuple):
    """A prose path from ``start`` is longer than the bound and still running."""

    start: int
    stop: re.Pattern[str] = _STOP_SHELL  #: where it ends (hand it to :class:`OverlongPath`)


class Clear(NamedTuple):
    """No path starts before ``end``; ``buf[end:]`` (a possible start) must wait."""

    end: int


ScanResult = Found | NeedMore | Overlong | Clear


class Memo:
    """Search results a caller keeps while it scans one and the same buffer.

    ``search``: pattern -> (searched from, first match or None), see :func:`_first`;
    ``second``: (searched from, first start after whitespace or -1), see
    :meth:`PathDetector._second_start`. A new buffer needs a new memo."""

    __slots__ = ("search", "second")

    def __init__(self) -> None:
        self.search: dict[re.Pattern[str], tuple[int, re.Match[str] | None]] = {}
        self.second: tuple[int, int] | None = None


def _first(pat: re.Pattern[str], buf: str, pos: int, memo: Memo | None) -> re.Match[str] | None:
    """``pat.search(buf, pos)``, memoised per buffer.

    A search from ``p0`` that found its first match at ``m`` (or none) answers every
    later search from ``p0 <= pos <= m``: the matches of these patterns do not depend
    on where the search started (look-behinds see the whole buffer). So quoted starts
    that share one far closer (or one missing closer) cost one search between them,
    not one each (``](`` repeated 10^5 times was quadratic)."""
    if memo is None:
        return pat.search(buf, pos)
    got = memo.search.get(pat)
    if got is not None:
        p0, m = got
        if p0 <= pos and (m is None or pos <= m.start()):
            return m
    m = pat.search(buf, pos)
    memo.search[pat] = (pos, m)
    return m


_tuple_new = tuple.__new__


def _found(start: int, end: int, match: PathMatch) -> Found:
    """``Found(...)`` without the generated ``__new__`` (hot path: one per path)."""
    found: Found = _tuple_new(Found, (start, end, match))
    return found


def _match(raw: str, path: str, name: str, context: Context, json: int, pct: int) -> PathMatch:
    """``PathMatch(...)`` without the generated ``__new__``."""
    match: PathMatch = _tuple_new(PathMatch, (raw, path, name, context, False, "", json, pct))
    return match


class OverlongPath:
    """Consumes an overlong prose path to its end, keeping only its last segments.

    Memory stays bounded by :data:`MAX_NAME_CHARS`; nothing of the path is
    emitted until it ends, and then only its name (as written).
    """

    def __init__(self, stop: re.Pattern[str] = _STOP_SHELL) -> None:
        self._stop = stop
        self._depth = 0
        self._last = ""  # current (last) segment, truncated
        self._prev_seg = ""  # the segment before it (for paths ending in a separator)
        self._pending = ""  # trailing backslashes: their meaning depends on the next char
        self.tail = ""  # last LOOKBEHIND raw characters consumed

    def feed(self, text: str, final: bool) -> tuple[str, PathMatch] | None:
        """Consume ``text``; when the path ends return (the text after it, the match)."""
        text = self._pending + text
        self._pending = ""
        if not final and text.endswith("\\"):
            cut = len(text.rstrip("\\"))
            text, self._pending = text[:cut], text[cut:]
        # brackets only move ``pos``: the text is consumed once, at the end (one
        # split per feed, not one per bracket: ``((((...`` stays linear)
        pos = 0
        while True:
            m = self._stop.search(text, pos)
            if m is None:
                self._consume(text)
                return (text[len(text) :], self._finish()) if final else None
            ch = m.group()
            if ch in _OPENERS or (ch in _CLOSER_OF and self._depth > 0):
                self._depth += 1 if ch in _OPENERS else -1
                pos = m.end()
                continue
            self._consume(text[: m.start()])
            return text[m.start() :], self._finish()

    def _consume(self, chunk: str) -> None:
        if not chunk:
            return
        self.tail = (self.tail + chunk)[-LOOKBEHIND:]
        segs = _SEPARATORS.split(self._last + chunk)
        if len(segs) > 1:
            middle = [s for s in segs[:-1] if s]
            if middle:
                self._prev_seg = middle[-1][-MAX_NAME_CHARS:]
        self._last = segs[-1][-MAX_NAME_CHARS:]

    def _finish(self) -> PathMatch:
        name = self._last
        stripped = name.rstrip(_TRAILING_PUNCT)
        trailing = name[len(stripped) :]
        if not stripped:
            stripped = self._prev_seg.rstrip(_TRAILING_PUNCT) or "~"
        return PathMatch("", "", stripped, Context.PROSE, overlong=True, suffix=trailing)


def _code_span(buf: str, s: int, res: ScanResult) -> ScanResult:
    """A path that fills a code span is replaced with its backticks (see Context.CODE)."""
    if type(res) is NeedMore:
        return NeedMore(s - 1)
    if type(res) is not Found or buf[res.end : res.end + 1] != "`":
        return res
    match = res.match
    if match.raw != buf[s : res.end]:
        return res  # trailing spaces inside the span: keep the plain quoted reading
    raw = "`" + match.raw + "`"
    return _found(s - 1, res.end + 1, match._replace(raw=raw, context=Context.CODE))


class PathDetector:
    """Finds host-local paths; see the module docstring for the rules.

    ``extra_roots`` are the configured artifact roots and mount prefixes, POSIX
    (``/srv/agent/artifacts``) or Windows (``C:\\work``). A POSIX one is a path
    start of its own (also alone, in any letter case); a Windows one is a drive
    path anyway and only gives its spelling to the normal form. A detector holds
    no per-stream state: one instance serves any number of rewriters (see
    :meth:`shared`).
    """

    lookbehind = LOOKBEHIND

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def shared(
        extra_roots: tuple[str, ...] = (), max_path_chars: int = DEFAULT_MAX_PATH_CHARS
    ) -> PathDetector:
        """A cached detector for these settings (building one compiles a regex)."""
        return PathDetector(extra_roots, max_path_chars=max_path_chars)

    def __init__(
        self, extra_roots: Iterable[str] = (), *, max_path_chars: int = DEFAULT_MAX_PATH_CHARS
    ) -> None:
        posix: list[str] = []
        win: list[str] = []
        for r in extra_roots:
            r = str(r)
            if re.match(r"[A-Za-z]:[\\/]", r):
                win.append(_canon_win(r))
            elif r.startswith("/") and r.strip("/"):
                posix.append(_canon_posix(r))
        posix = sorted(set(posix), key=len, reverse=True)
        self._posix_roots = tuple(posix)
        self._win_roots = tuple(sorted(set(win), key=len, reverse=True))
        alts, self._start, self._prefix = _start_patterns(self._posix_roots)
        # a configured root of two or more segments is a start also right after a
        # letter, digit, "." or "~" (x/srv/agent/artifacts/a names the layout all the
        # same); a one-segment one (/workspace) keeps the boundary rule, it is too
        # common in URL paths (https://host.example/workspace/...)
        glued = tuple(r for r in posix if "/" in r.strip("/"))
        self._glued_start, self._glued_prefix = (
            _by_first_char([_cfg_start(glued)]) if glued else ({}, {})
        )
        self._cfg_lower = tuple(r.lower() for r in (*self._posix_roots, *self._win_roots))
        self.max_path_chars = max_path_chars
        self.max_start_chars = max(a.maxlen for a in alts) + 1
        #: (glued, the first HEAD_CHARS of a buffer from a start) → is it a prefix?
        self._head_memo: dict[tuple[bool, str], bool] = {}
        self._memo_slot: tuple[str | None, Memo] = (None, Memo())

    def new_buffer(self) -> None:
        """Forget the search memo: a rewriter calls this before it scans a buffer of its
        own. The memo is kept for the buffer object last scanned (the loop of one feed
        scans one buffer many times), and ``"" + "" + text`` is ``text`` itself: the
        same string object fed again, by another rewriter or at another bound, must
        not reuse what was found for the last one."""
        self._memo_slot = (None, Memo())

    # -- start recognition -------------------------------------------------------

    def _word_starts(self, buf: str, k: int, lo: int) -> list[int]:
        """Boundary positions in the ASCII word that ends before ``buf[k]`` (for
        ``C:``, ``file:``, ``vscode:``), leftmost first: its first letter, a letter
        after ``-``, after a JSON ``\\n`` or after a ``%XX`` escape."""
        if k < 2 or buf[k - 2] not in _WORD:  # one letter: a drive (the common case)
            return [k - 1] if buf[k - 1] != "-" and _boundary_at(buf, k - 1) else []
        # the word may begin in the emitted history (``--include`` + ``C:``): it is read
        # there, within the look-behind, but only starts from ``lo`` on are returned
        j = k
        floor = max(0, k - 24)
        while j > floor and buf[j - 1] in _WORD:
            j -= 1
        # inside the word only j + 1 (after \\n or %XX) or a letter after "-" can be one
        cands = range(max(j, lo), k) if "-" in buf[j:k] else (j, j + 1)
        return [i for i in cands if lo <= i < k and buf[i] != "-" and _boundary_at(buf, i)]

    def _tail_start(self, buf: str, lo: int) -> int:
        """Where a possible start begins in a letter tail of ``buf`` (``C``, ``fil``,
        ``vsco``: their trigger has not arrived yet), or at a trailing backtick (it may
        open a code span around a path, which is then replaced whole); ``len(buf)`` if
        none."""
        n = len(buf)
        if n > lo and buf[-1] == "`":
            return n - 1
        if n <= lo or buf[-1] not in _WORD:
            return n
        for i in self._word_starts(buf, n, lo):
            if i == n - 1 or buf[i:].lower() in _LETTER_PREFIXES:
                return i - 1 if i > lo and buf[i - 1] == "`" else i
        return n

    def _inside_start(self, buf: str, s: int, glued: bool) -> bool:
        """Does ``buf`` end inside a start at ``buf[s]`` (is ``buf[s:]`` a prefix of one)?

        The prefix languages are prefix-closed (a prefix of a prefix of a start is one:
        see the grammar's nodes), so a head that is no prefix refuses the whole. The
        answer for the first :data:`HEAD_CHARS` characters is memoised: a big prefix
        regex costs ≈ 6 µs a try whatever the length (its alternatives for ``/tmp``,
        ``/home``...), its head's answer a dict lookup; only a head that is a prefix
        (``/mnt/c/P``) is followed by the whole match."""
        prefix = (self._glued_prefix if glued else self._prefix)[buf[s]]
        head = buf[s : s + HEAD_CHARS]
        key = (glued, head)
        memo = self._head_memo
        known = memo.get(key)
        if known is None:
            known = prefix.fullmatch(head) is not None
            if len(memo) >= HEAD_MEMO_MAX:
                memo.clear()
            memo[key] = known
        if not known:
            return False
        return s + len(head) == len(buf) or prefix.fullmatch(buf, s) is not None

    def _start_at(
        self,
        buf: str,
        s: int,
        final: bool,
        lo: int = 0,
        memo: Memo | None = None,
        glued: bool = False,
        json_text: bool = False,
    ) -> ScanResult | None:
        """Is there a start at ``buf[s]``? Parse the path, hold it, or None.

        ``lo``: where the not yet emitted text begins (a code span's opening backtick
        before it cannot be part of a replacement any more). ``glued``: not at a
        boundary, only a multi-segment configured root may start here. ``json_text``:
        the channel is JSON text, where one backslash is always an escape."""
        starts = self._glued_start if glued else self._start
        start = starts.get(buf[s])
        if start is None:
            return None
        m = start.match(buf, s)
        n = len(buf)
        # a buffer ending inside a start is held even when a shorter start matched:
        # C:\\Program Fi may still become C:\\Program Files\\ (one segment), and
        # deciding on the shorter one would depend on where the chunk ended
        if not final and n - s <= self.max_start_chars and self._inside_start(buf, s, glued):
            return NeedMore(s - 1 if s > lo and buf[s - 1] == "`" else s)
        if m is None or (not final and m.end() == n):
            return None
        family = m.lastgroup or ""
        st = m.group()
        if (
            s
            and buf[s - 1] == ":"
            and st[:2] == "//"
            and st[2:3] != "/"
            and family in ("posix", "cfg")
        ):
            return None  # scheme://host: a URL authority (scheme:///x has none: a path)
        if family == "drive" and s and buf[s - 1].isalpha() and _SCHEME_SLASHES.match(buf, s):
            # -Imyeditor:\/\/file\/...: a scheme's "//" glued to the flag -I, not the flag
            # -Imyedito and a drive r: (the drive is only a start after a boundary)
            return None
        if family in ("posix", "cfg"):
            # the separator after the root says how the rest is spelled too
            # (/home%2Fbob%2Fx is percent-encoded, /home\\/bob JSON-escaped)
            sep = _SEP_AT.match(buf, m.end())
            if sep is not None:
                if not final and sep.end() == n:
                    return NeedMore(s - 1 if s > lo and buf[s - 1] == "`" else s)
                st += sep.group()
        sp = _spelling_of(family, st)
        if (
            family in _WIN_BODY_FAMILIES
            and not (sp.win or sp.pct or sp.html)
            and _WIN_BODY.match(buf, s) is not None
        ):
            sp = _spelling(True, sp.json, 0)
            if family == "posix" and not sp.json:  # Git Bash: a shell escape (My\ F) too
                sp = _GIT_BASH
        if json_text and sp.win and not sp.json:
            sp = _in_json_text_channel(sp)  # "type \"C:/x.txt\"": \" is an escape
        ctx, closer = self._context(buf, s)
        if closer and not (family == "var" and '"' in st):  # "$HOME"/x: the quote is closed
            res = self._parse_quoted(buf, s, m.end(), family, sp, ctx, closer, final, memo)
            if res is not None:
                return _code_span(buf, s, res) if closer == "`" and s > lo else res
        res = self._parse_prose(buf, s, m.end(), family, sp, final)
        if family == "var" and '"' in st and type(res) is Found and s and buf[s - 1] == '"':
            # "$HOME"/x/a.txt -> "a.txt": the quote the variable closed closes the name
            res = _found(res.start, res.end, res.match._replace(suffix='"'))
        return res

    # -- the scan ----------------------------------------------------------------

    def scan(self, buf: str, pos: int, final: bool, json_text: bool = False) -> ScanResult:
        """Find the next path at or after ``buf[pos]``.

        ``buf[:pos]`` is context only (up to :data:`LOOKBEHIND` characters already
        emitted): it is looked at for boundaries and openers but never reported.
        The rewriter scans one buffer many times (once per path, from its end):
        those scans share one :class:`Memo`, which makes scanning the buffer linear.
        It lives in a one-entry slot keyed by the buffer's identity (a ``str`` never
        changes), read and replaced as one tuple: rewriters sharing the detector only
        cost each other a miss.
        """
        slot = self._memo_slot
        if slot[0] is buf:
            memo = slot[1]
        else:
            memo = Memo()
            self._memo_slot = (buf, memo)
        k = pos
        search = _TRIGGER.search
        while True:
            t = search(buf, k)
            if t is None:
                return Clear(len(buf) if final else self._tail_start(buf, pos))
            k = t.start()
            ch = t.group()
            if ch in ":%" and k > pos and buf[k - 1] in _WORD:
                for i in self._word_starts(buf, k, pos):
                    res = self._start_at(buf, i, final, pos, memo, False, json_text)
                    if res is not None:
                        return res
            if ch != ":":
                if _boundary_at(buf, k):
                    res = self._start_at(buf, k, final, pos, memo, False, json_text)
                    if res is not None:
                        return res
                elif buf[k] in self._glued_start and buf[k - 1] not in "/\\":
                    res = self._start_at(buf, k, final, pos, memo, True, json_text)
                    if res is not None:
                        return res
            k += 1

    def _context(self, buf: str, start: int) -> tuple[Context, str]:
        c1 = buf[start - 1] if start >= 1 else ""
        if c1 == '"' and start >= 2 and buf[start - 2] == "\\":
            return Context.QUOTED, '\\"'
        if c1 in _QUOTE_CLOSERS:
            return Context.QUOTED, _QUOTE_CLOSERS[c1]
        if c1 == "(" and start >= 2 and buf[start - 2] == "]":
            return Context.QUOTED, ")"
        if c1 == "[":
            return Context.LINK_TEXT, "]"
        if c1 in " \u00a0\u202f" and start >= 2 and buf[start - 2] in "«‹":
            # French typography: « /Users/Jean Dupont/x.txt » (a space, often a no-break one)
            return Context.QUOTED, _QUOTE_CLOSERS[buf[start - 2]]
        return Context.PROSE, ""

    def _parse_quoted(
        self,
        buf: str,
        start: int,
        body: int,
        family: str,
        sp: _Spelling,
        ctx: Context,
        closer: str,
        final: bool,
        memo: Memo | None = None,
    ) -> ScanResult | None:
        """A delimited path; None means "read it as prose instead"."""
        limit = start + self.max_path_chars
        ends = sp.quote_end
        m = _first(ends.get(closer) or ends[closer[-1]], buf, body, memo)
        if closer == ")" and m is not None and m.group(1) is not None:
            m = _balanced_closer(buf, start, m, ends[")"])
        if m is not None and m.end() > limit + 1:
            m = None  # no closer within the bound (so len(buf) > limit): prose
        if m is None:
            if final or len(buf) > limit:
                return None
            return NeedMore(start)
        if m.group(1) is None:
            return None
        if closer == "'" and not final and _SQ_UNDECIDED.fullmatch(buf, m.end()):
            # O'Brien, O'\''Brien, O'"'"'Brien: what follows may make it no closer
            return NeedMore(start)
        raw = buf[start : m.end() - 1].rstrip()
        # from start + 1: a memoised answer may be the start itself (« /x: a space before it)
        if self._second_start(buf, start + 1, start + len(raw), memo):
            return None
        if closer in _TYPO_CLOSERS:
            # typographic quotes wrap sentences too (“/tmp/a.txt is mine and/or yours”):
            # a file name's extension then a space ends the path there
            ext = _EXT_SPACE.search(raw)
            if ext is not None:
                raw = raw[: ext.end(1)]
        return self._finish(raw, start, body, family, sp, ctx)

    def _second_start(self, buf: str, lo: int, hi: int, memo: Memo | None = None) -> bool:
        """Does the quoted text ``buf[lo:hi]`` hold a second path start after whitespace?

        The first candidate at or after ``lo`` in the whole buffer is memoised (a
        later quoted start before it gets the same answer without a rescan); only a
        candidate whose start runs past ``hi`` is looked at again, within ``hi``."""
        got = memo.second if memo is not None else None
        if got is not None and got[0] <= lo and (got[1] < 0 or lo <= got[1]):
            q = got[1]
        else:
            q = self._next_second_start(buf, lo, len(buf))
            if memo is not None:
                memo.second = (lo, q)
        if q < 0 or q >= hi:
            return False
        start = self._start[buf[q]]
        if start.match(buf, q, hi) is not None:
            return True
        return self._next_second_start(buf, q + 1, hi) >= 0

    def _next_second_start(self, buf: str, lo: int, hi: int) -> int:
        """The first start after whitespace in ``buf[lo:hi]`` (-1 if none)."""
        for m in _SECOND_START.finditer(buf, lo, hi):
            start = self._start.get(buf[m.end()])
            if start is not None and start.match(buf, m.end(), hi) is not None:
                return m.end()
        return -1

    def _parse_prose(
        self, buf: str, start: int, body: int, family: str, sp: _Spelling, final: bool
    ) -> ScanResult | None:
        n = len(buf)
        limit = start + self.max_path_chars
        stop = sp.stop
        m = stop.search(buf, body)
        cont = body  # where the segment holding a space starts at the earliest
        while m is not None and (m.group().isspace() or m.group() == "'"):
            # Application Support/, O'Brien/: read on
            k = _read_on(buf, cont, m, stop, limit, final)
            if k < 0:
                return NeedMore(start)
            if k == 0:
                break
            cont = k
            m = stop.search(buf, k)
        if m is not None and m.group() not in _BRACKETS and m.start() <= limit:
            # fast path: no bracket inside, the first stop ends the path
            raw = buf[start : m.start()].rstrip(_TRAILING_PUNCT)
            before = _opener_before(buf, start)
            if before in ("_", "~"):
                raw = _trim_end(raw, before)
            if sp.html or "&" in raw:
                raw = _entity_end(buf, start, raw)
            return self._finish(raw, start, body, family, sp, Context.PROSE)
        depth, cont = 0, body
        j = body
        while True:
            m = stop.search(buf, j)
            if m is None:
                if not final and n <= limit:
                    return NeedMore(start)
                end = n
                break
            end = m.start()
            if end > limit:
                break  # longer than the bound whatever follows: overlong
            ch = m.group()
            if ch.isspace() or ch == "'":
                k = _read_on(buf, cont, m, stop, limit, final)
                if k < 0:
                    return NeedMore(start)
                if k > 0:
                    j = cont = k
                    continue
            if ch in _OPENERS or (ch in _CLOSER_OF and depth > 0):
                depth += 1 if ch in _OPENERS else -1
                j = m.end()
                continue
            break
        if end > limit:
            # at most max_path_chars bracket steps per start; the rest (to the
            # path's end) is one linear pass of OverlongPath
            done = OverlongPath(stop).feed(buf[start:], final)
            if done is None:
                return Overlong(start, stop)
            return Found(start, n - len(done[0]), done[1])
        raw = _trim_end(buf[start:end], _opener_before(buf, start))
        if sp.html or "&" in raw:
            raw = _entity_end(buf, start, raw)
        return self._finish(raw, start, body, family, sp, Context.PROSE)

    def _finish(
        self, raw: str, start: int, body: int, family: str, sp: _Spelling, ctx: Context
    ) -> Found | None:
        """The match for ``raw``, or None when it names no folder (``/tmp/``, ``C:\\``)."""
        if raw[-1:] == "\\":
            raw = _give_back(raw, sp)
        b = body - start
        if len(raw) < b:  # the backslash given back was the start's: is it one still?
            again = self._start[raw[0]].match(raw) if raw else None
            if again is None or again.end() > len(raw):
                return None
            b = again.end()
        if family != "cfg" and (family != "tilde" or _TILDE_ALONE.match(raw) is not None):
            # a generic anchor (/tmp/, ~/, C:\\) needs a name after it, not a space
            rest = raw[b:]
            lead = _EMPTY_BODY.match(rest) if "%" in rest or "\\u" in rest or "&" in rest else None
            first = _NON_SEPARATOR.search(rest, lead.end() if lead else 0)
            if first is None or first.group().isspace():
                return None
        json = sp.json
        if not json and "\\" in raw and _in_json_text(raw, family, sp):
            json = 1
        if not sp.html and "&" in raw and _HTML_SEP.search(raw):
            # C:\\Users&#x2F;bob: HTML references after a plain start
            sp = _spelling(sp.win, sp.json, sp.pct, True)
        path = self._normal(family, raw, sp, json)
        name = file_name(path)
        if "%" in name or "&" in name:
            name = _after_encoded_separator(name)
        m = _match(raw, path, name, ctx, json, sp.pct)
        return _found(start, start + len(raw), m)

    # -- normal form -------------------------------------------------------------

    def _normal(self, family: str, raw: str, sp: _Spelling, json: int) -> str:
        if family == "posix" and not (sp.pct or json or sp.html) and "\\" not in raw:
            path = _canon_posix(raw)
            return self._configured(path) if self._cfg_lower else path
        s = html.unescape(raw) if sp.html else raw
        if sp.html and "&" in s:  # &amp;#x2F; (escaped twice)
            s = html.unescape(s)
        for _ in range(sp.pct):
            s = unquote(s)
        for _ in range(json):
            s = _json_unescape(s)
        if not sp.win and "\\" in s and (json <= 1 or sp.json == 0):
            s = _SHELL_ESC.sub(r"\1", s)  # after the JSON escapes of a plain path
        elif sp is _GIT_BASH:  # /c/Program\ Files/x: the escaped space is the name's
            s = s.replace("\\ ", " ")
        if family in ("posix", "cfg"):
            return self._configured(_canon_posix(s.replace("\\", "/") if sp.win else s))
        if family in ("drive", "winroot"):
            return self._configured(_canon_win(s))
        if family == "unc":
            return "\\\\" + _canon_win(s.replace("/", "\\").lstrip("\\"))
        if family == "device":
            return self._configured(_normal_device(s))
        if family == "tilde":
            head = _TILDE_HEAD.match(s)
            if head is None:  # a spelling of the start this does not read: as written
                return _canon_rest(s, sp.win)
            return head.group() + _canon_rest(s[head.end() :], sp.win)
        if family == "var":
            return _normal_var(s, sp.win)
        if family == "file":
            return self._configured(_normal_file_uri(s, sp.win))
        if family == "remote":
            return self._configured(_normal_remote(s))
        return self._configured(_normal_deeplink(s, sp.win))

    def _configured(self, path: str) -> str:
        """A configured root written in another letter case gets its configured spelling."""
        low = path.lower()
        if not low.startswith(self._cfg_lower):
            return path
        roots = self._win_roots if path[1:2] == ":" else self._posix_roots
        for root in roots:
            r = root.lower()
            if low == r or (low.startswith(r) and low[len(r)] in "/\\"):
                return root + path[len(root) :]
        return path
