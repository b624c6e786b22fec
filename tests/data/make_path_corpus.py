# Generates tests/data/path_corpus.json (kept as data; edit here, re-run, review the diff).
# Run from the project root: .venv/bin/python tests/data/make_path_corpus.py
import json

B = "\\"
C = []


def c(text, expect, paths=None, note=""):
    C.append(
        {"text": text, "expect": expect, "paths": paths if paths is not None else [], "note": note}
    )


# --- POSIX roots, prose
c(
    "See /Users/alice/out/report.pdf for details",
    "See report.pdf for details",
    ["/Users/alice/out/report.pdf"],
)
c("/home/bob/plot.png", "plot.png", ["/home/bob/plot.png"], "whole text is a path")
c("Saved to /tmp/x.csv.", "Saved to x.csv.", ["/tmp/x.csv"], "trailing full stop")
c("Files: /tmp/a.txt, /tmp/b.txt; done", "Files: a.txt, b.txt; done", ["/tmp/a.txt", "/tmp/b.txt"])
c("Is it /var/log/app.log?", "Is it app.log?", ["/var/log/app.log"])
c("Wow /opt/x/y.bin!", "Wow y.bin!", ["/opt/x/y.bin"])
c("at /srv/agent/workspace/out.md: ok", "at out.md: ok", ["/srv/agent/workspace/out.md"])
c(
    "/private/var/folders/zz/T/tmp123/file.txt",
    "file.txt",
    ["/private/var/folders/zz/T/tmp123/file.txt"],
)
c(
    "mounted /Volumes/USB Drive/a.txt",
    "mounted USB Drive/a.txt",
    ["/Volumes/USB"],
    "prose ends at space: rest is not a path",
)
c("/mnt/data/big.parquet is ready", "big.parquet is ready", ["/mnt/data/big.parquet"])
c("config at /etc/nginx/nginx.conf\n", "config at nginx.conf\n", ["/etc/nginx/nginx.conf"])
c("root: /root/.bashrc", "root: .bashrc", ["/root/.bashrc"])
c(
    "dir /Users/alice/out/ has files",
    "dir out has files",
    ["/Users/alice/out"],
    "directory: last segment; the normal form drops the trailing separator",
)
c("home is /Users/alice", "home is ~", ["/Users/alice"], "home dir never shows the user name")
c("home is /home/bob/ ok", "home is ~ ok", ["/home/bob"])
c("/users/alice/x.txt", "x.txt", ["/users/alice/x.txt"], "lower-case macOS users")
c("see /tmp/a(1).txt now", "see a(1).txt now", ["/tmp/a(1).txt"], "balanced parens inside")
c("(see /tmp/a.txt)", "(see a.txt)", ["/tmp/a.txt"], "closing paren ends the path")
c("(see /tmp/a(1).txt)", "(see a(1).txt)", ["/tmp/a(1).txt"])
c("[see /tmp/a.txt]", "[see a.txt]", ["/tmp/a.txt"])
c("{/tmp/a.txt}", "{a.txt}", ["/tmp/a.txt"])
c("**/tmp/bold.txt**", "**bold.txt**", ["/tmp/bold.txt"], "markdown bold")
c("| /tmp/cell.txt |", "| cell.txt |", ["/tmp/cell.txt"], "table cell")
c("path=/tmp/q.txt&x", "path=q.txt&x", ["/tmp/q.txt&x"], "= is a boundary; & is a path char")
c("--out=/tmp/out.json", "--out=out.json", ["/tmp/out.json"])
c("user@host:/home/u/secret.txt", "user@host:secret.txt", ["/home/u/secret.txt"], "scp syntax")
c("/tmp/report.pdf...", "report.pdf...", ["/tmp/report.pdf"], "ellipsis")
c("/tmp/v1.2/notes.txt", "notes.txt", ["/tmp/v1.2/notes.txt"])
c("two:/tmp/a.txt/tmp/b.txt", "two:b.txt", ["/tmp/a.txt/tmp/b.txt"], "one path")
c("tab\t/tmp/t.txt\tend", "tab\tt.txt\tend", ["/tmp/t.txt"])
c("line\r\n/tmp/crlf.txt\r\n", "line\r\ncrlf.txt\r\n", ["/tmp/crlf.txt"])
c("/tmp/it's.txt", "it's.txt", ["/tmp/it"], "apostrophe ends a prose path")
# --- configured roots (tests use extra_roots=["/workspace", "/data/artifacts"])
c("wrote /workspace/out/r.pdf", "wrote r.pdf", ["/workspace/out/r.pdf"], "configured root")
c("wrote /data/artifacts/x.bin", "wrote x.bin", ["/data/artifacts/x.bin"], "configured root")
c("wrote /data/other/x.bin", "wrote /data/other/x.bin", [], "not a root")
c("/workspacex/a.txt", "/workspacex/a.txt", [], "root must end at a separator")
# --- tilde
c("~/notes/today.md", "today.md", ["~/notes/today.md"])
c("edit ~/.ssh/id_rsa now", "edit id_rsa now", ["~/.ssh/id_rsa"])
c("~ alone and ~user", "~ alone and ~user", [])
c("a~/x", "a~/x", [], "tilde after a letter")
# --- file URIs
c(
    "file:///Users/alice/My%20Report.pdf",
    "My Report.pdf",
    ["/Users/alice/My Report.pdf"],
    "percent-decoded",
)
c("open file:///tmp/a.txt.", "open a.txt.", ["/tmp/a.txt"])
c("FILE:///tmp/up.txt", "up.txt", ["/tmp/up.txt"])
c("file://localhost/etc/hosts", "hosts", ["/etc/hosts"])
c("file:///C:/Users/bob/x.png", "x.png", ["C:" + B + "Users" + B + "bob" + B + "x.png"])
c(
    "file://server/share/doc.txt",
    "doc.txt",
    [B + B + "server" + B + "share" + B + "doc.txt"],
    "file URI authority: a UNC path",
)
c("profile:///x", "profile:///x", [], "file: inside a word")
c("file:// nothing", "file:// nothing", [])
# --- Windows drives
c(
    "C:" + B + "Users" + B + "bob" + B + "plot.png",
    "plot.png",
    ["C:" + B + "Users" + B + "bob" + B + "plot.png"],
)
c(
    "Saved C:/Users/bob/out/r.docx, ok",
    "Saved r.docx, ok",
    ["C:" + B + "Users" + B + "bob" + B + "out" + B + "r.docx"],
    "Windows normal form: backslashes",
)
c(
    "d:" + B + "data" + B + "x.csv",
    "x.csv",
    ["D:" + B + "data" + B + "x.csv"],
    "drive letter upper case",
)
c(
    "C:" + B + "Program Files" + B + "App" + B + "a.exe",
    "a.exe",
    ["C:" + B + "Program Files" + B + "App" + B + "a.exe"],
    "a space-holding Windows top folder is one segment (was: the space ended it)",
)
c(
    '"C:' + B + "Program Files" + B + "App" + B + 'a.exe"',
    '"a.exe"',
    ["C:" + B + "Program Files" + B + "App" + B + "a.exe"],
    "quoted: spaces allowed",
)
c(
    "C:" + B + B + "Users" + B + B + "bob" + B + B + "plot.png",
    "plot.png",
    ["C:" + B + "Users" + B + "bob" + B + "plot.png"],
    "JSON-escaped backslashes collapse",
)
c(
    '{"p": "C:' + B + B + "Users" + B + B + "bob" + B + B + 'plot.png"}',
    '{"p": "plot.png"}',
    ["C:" + B + "Users" + B + "bob" + B + "plot.png"],
)
c("C:" + B + "Users" + B + "bob", "~", ["C:" + B + "Users" + B + "bob"], "Windows home dir")
c("https://example.com/x", "https://example.com/x", [], "URL is never a drive path")
c("http://host/C:/x", "http://host/C:/x", [], "drive inside URL path")
c("s://x", "s://x", [], "single-letter scheme")
c("ratio 3:1 and C: drive", "ratio 3:1 and C: drive", [])
c("a c:" + B + " b", "a c:" + B + " b", [], "drive root alone")
c("abC:" + B + "x", "abC:" + B + "x", [], "drive letter after letters")
c("time 10:30/tmp", "time 10:30/tmp", [], "no root segment")
# --- UNC
c(
    B + B + "fileserver" + B + "share" + B + "q3.xlsx",
    "q3.xlsx",
    [B + B + "fileserver" + B + "share" + B + "q3.xlsx"],
)
c(
    "on " + B * 4 + "srv" + B * 2 + "share" + B * 2 + "a.txt",
    "on a.txt",
    [B + B + "srv" + B + "share" + B + "a.txt"],
    "JSON-escaped UNC",
)
c('print("' + B + B + 'n")', 'print("' + B + B + 'n")', [], "escaped newline is not UNC")
# --- quotes, code spans, links
c("`/tmp/my file.txt`", "`my file.txt`", ["/tmp/my file.txt"], "code span allows spaces")
c("'/tmp/a b.txt' x", "'a b.txt' x", ["/tmp/a b.txt"])
c('"/Users/alice/Q3 report.pdf"', '"Q3 report.pdf"', ["/Users/alice/Q3 report.pdf"])
c("</tmp/angle file.txt>", "<angle file.txt>", ["/tmp/angle file.txt"])
c(
    "[report](/Users/alice/out/report.pdf)",
    "report (report.pdf)",
    ["/Users/alice/out/report.pdf"],
    "markdown link target",
)
c("[report](/tmp/a b.pdf)", "report (a b.pdf)", ["/tmp/a b.pdf"])
c(
    "[/tmp/x.pdf](/tmp/x.pdf)",
    "x.pdf",
    ["/tmp/x.pdf", "/tmp/x.pdf"],
    "link text and target",
)
c(
    '"/tmp/a.txt /tmp/b.txt"',
    '"a.txt b.txt"',
    ["/tmp/a.txt", "/tmp/b.txt"],
    "two paths in one quote",
)
c(
    "`/tmp/unclosed file.txt\nnext",
    "`unclosed file.txt\nnext",
    ["/tmp/unclosed"],
    "no closer on the line: prose",
)
c("```\n/tmp/in_fence.py\n```", "```\nin_fence.py\n```", ["/tmp/in_fence.py"])
c("'/tmp/x.txt'.", "'x.txt'.", ["/tmp/x.txt"])
# --- CJK and unicode
c(
    "保存在/tmp/报告.pdf。然后",
    "保存在报告.pdf。然后",
    ["/tmp/报告.pdf"],
    "CJK runs into the path; CJK full stop ends it",
)
c("文件：/Users/李雷/图表.png，好的", "文件：图表.png，好的", ["/Users/李雷/图表.png"])
c("ファイル/tmp/データ.csv", "ファイルデータ.csv", ["/tmp/データ.csv"])
c("see /tmp/résumé 2026.txt", "see résumé 2026.txt", ["/tmp/résumé"])
c('see "/tmp/résumé 2026.txt"', 'see "résumé 2026.txt"', ["/tmp/résumé 2026.txt"])
c("emoji /tmp/🎉party.txt!", "emoji 🎉party.txt!", ["/tmp/🎉party.txt"])
c("café/tmp/x", "café/tmp/x", [], "latin letter before slash")
c(
    "_/Users/alice/Desktop/draft.txt_ and *~/notes/todo.md*",
    "_draft.txt_ and *todo.md*",
    ["/Users/alice/Desktop/draft.txt", "~/notes/todo.md"],
    "markdown emphasis: _ is punctuation, the closing _ is not part of the path",
)
c(
    "-/Users/alice/b.txt and [a]/Users/alice/c.txt",
    "-b.txt and [a]c.txt",
    ["/Users/alice/b.txt", "/Users/alice/c.txt"],
    "- and ] are punctuation",
)
# --- negatives
c("and/or", "and/or", [])
c("1/2 cup", "1/2 cup", [])
c("GET /v1/models", "GET /v1/models", [], "API route in prose")
c("POST /v1/chat/completions", "POST /v1/chat/completions", [])
c("https://example.com/home/alice/x.pdf", "https://example.com/home/alice/x.pdf", [], "URL path")
c("http://127.0.0.1:8642/tmp/x", "http://127.0.0.1:8642/tmp/x", [])
c("/tmp", "/tmp", [], "bare root")
c("/tmp/ is a directory", "/tmp/ is a directory", [], "root with nothing after")
c("/tmpfile", "/tmpfile", [])
c("src/gateway/app.py", "src/gateway/app.py", [], "relative path")
c("../tmp/x.txt", "../tmp/x.txt", [])
c("x//tmp/a", "x//tmp/a", [])
c("plain prose without any candidate at all.", "plain prose without any candidate at all.", [])
c("", "", [])
# ============ this round: every spelling of the same path =======================
# tests use extra_roots=["/workspace", "/data/artifacts", "/srv/agent/artifacts", "C:\work"]
W = B  # one Windows separator
# --- 1. directories; a configured root or mount prefix alone is a path
c(
    "everything is in /srv/agent/artifacts/ now",
    "everything is in artifacts now",
    ["/srv/agent/artifacts"],
    "configured root alone, trailing separator",
)
c("see /workspace", "see workspace", ["/workspace"], "mount prefix alone")
c("see /workspace.", "see workspace.", ["/workspace"], "mount prefix alone before a full stop")
c("in (/workspace) and", "in (workspace) and", ["/workspace"])
c('"/data/artifacts/"', '"artifacts"', ["/data/artifacts"], "quoted configured root")
c("`/srv/agent/artifacts`", "`artifacts`", ["/srv/agent/artifacts"])
c("/workspace/ and /workspace", "workspace and workspace", ["/workspace", "/workspace"])
c("/srv/agent/artifacts/out/", "out", ["/srv/agent/artifacts/out"], "directory under a root")
c("dir /tmp/build/ ok", "dir build ok", ["/tmp/build"])
c("/workspace.bak/x.txt", "/workspace.bak/x.txt", [], "not the root: another folder")
c("/workspaces/x", "/workspaces/x", [], "not the root: longer name")
c("a /tmp/ b /Users/ c ~/ d", "a /tmp/ b /Users/ c ~/ d", [], "generic anchors alone name nothing")
c("C:" + W + "work", "work", ["C:" + W + "work"], "Windows mount prefix alone")
# --- 2a. JSON-escaped slashes and backslashes
c(
    '{"path": "\\/Users\\/alice\\/x.pdf"}',
    '{"path": "x.pdf"}',
    ["/Users/alice/x.pdf"],
    "JSON-escaped slashes",
)
c("see \\/tmp\\/a\\/b.txt now", "see b.txt now", ["/tmp/a/b.txt"], "escaped slashes in prose")
c(
    '{"p": "\\/srv\\/agent\\/artifacts\\/r.pdf"}',
    '{"p": "r.pdf"}',
    ["/srv/agent/artifacts/r.pdf"],
    "escaped configured root: normal form for the resolver",
)
c('{"p": "\\/srv\\/agent\\/artifacts\\/"}', '{"p": "artifacts"}', ["/srv/agent/artifacts"])
c(
    '{\\"path\\": \\"\\/Users\\/alice\\/x.pdf\\"}',
    '{\\"path\\": \\"x.pdf\\"}',
    ["/Users/alice/x.pdf"],
    'JSON inside a JSON string: the closing \\" is given back',
)
c(
    '"\\\\\\/Users\\\\\\/alice\\\\\\/two.txt"',
    '"two.txt"',
    ["/Users/alice/two.txt"],
    "two levels of escaping (\\\\\\/)",
)
c(
    '"\\\\/Users\\\\/alice\\\\/two.txt"',
    '"two.txt"',
    ["/Users/alice/two.txt"],
    "two levels, inner slash escaped only (\\\\/)",
)
c(
    "\\u002fUsers\\u002falice\\u002fu.txt",
    "u.txt",
    ["/Users/alice/u.txt"],
    "\\u002f separators",
)
c(
    '{"p": "/tmp/\\u62a5\\u544a.pdf"}',
    '{"p": "报告.pdf"}',
    ["/tmp/报告.pdf"],
    "json.dumps ensure_ascii: \\u escapes decoded",
)
c(
    '{"content": "Saved to /tmp/x.txt\\nDone"}',
    '{"content": "Saved to x.txt\\nDone"}',
    ["/tmp/x.txt"],
    "a JSON \\n ends the path",
)
c(
    '{"content": "line\\n/Users/alice/y.txt"}',
    '{"content": "line\\ny.txt"}',
    ["/Users/alice/y.txt"],
    "a JSON \\n before the path is a boundary",
)
c('"a\\t/tmp/t.txt\\t"', '"a\\tt.txt\\t"', ["/tmp/t.txt"], "JSON \\t on both sides")
c(
    '{"p": "\\/tmp\\/say \\"hi\\".txt"}',
    '{"p": "say \\"hi\\".txt"}',
    ['/tmp/say "hi".txt'],
    "inside a JSON string an escaped quote is part of the path, and is escaped again",
)
c(
    'x "\\/tmp\\/a\\"b.txt" y',
    'x "a\\"b.txt" y',
    ['/tmp/a"b.txt'],
    "JSON-spelled path in quotes: the escaped quote is part of the name",
)
c(
    '{"p": "C:\\\\Users\\\\bob\\\\new.txt"}',
    '{"p": "new.txt"}',
    ["C:" + W + "Users" + W + "bob" + W + "new.txt"],
    "JSON Windows: \\\\n is a separator, not a newline",
)
c(
    '"C:\\\\Users\\\\bob\\\\x.txt\\nnext"',
    '"x.txt\\nnext"',
    ["C:" + W + "Users" + W + "bob" + W + "x.txt"],
    "quoted, but an escaped newline comes first: read as prose, ending at the \\n",
)
# --- 2b. percent-encoded separators
c(
    "get %2FUsers%2Falice%2FMy%20F.pdf now",
    "get My%20F.pdf now",
    ["/Users/alice/My F.pdf"],
    "percent-encoded: the name stays encoded",
)
c("%2fusers%2falice%2fx.pdf", "x.pdf", ["/users/alice/x.pdf"], "lower-case escapes")
c(
    "http://viewer.example/open?path=%2FUsers%2Falice%2Fx.pdf&y=1",
    "http://viewer.example/open?path=x.pdf&y=1",
    ["/Users/alice/x.pdf"],
    "in a query string: & ends it, the URL stays a URL",
)
c(
    "?p=%252FUsers%252Falice%252Fdeep.pdf",
    "?p=deep.pdf",
    ["/Users/alice/deep.pdf"],
    "double percent-encoding",
)
c(
    "u=%2Fsrv%2Fagent%2Fartifacts%2Fr.pdf",
    "u=r.pdf",
    ["/srv/agent/artifacts/r.pdf"],
    "percent-encoded configured root",
)
c(
    "C%3A%5CUsers%5Cbob%5Cx.txt",
    "x.txt",
    ["C:" + W + "Users" + W + "bob" + W + "x.txt"],
    "percent-encoded Windows path (encodeURIComponent)",
)
c("%5C%5Csrv%5Cshare%5Cq.xlsx", "q.xlsx", [W + W + "srv" + W + "share" + W + "q.xlsx"])
c(
    "x %2Ftmp%2Fa%20b%28c%29.txt y",
    "x a%20b%28c%29.txt y",
    ["/tmp/a b(c).txt"],
    "a re-encoded name cannot end the surrounding URL",
)
c("file:/Users/alice/one.pdf", "one.pdf", ["/Users/alice/one.pdf"], "file: with one slash")
c("file:%2F%2F%2FUsers%2Falice%2Fenc.pdf", "enc.pdf", ["/Users/alice/enc.pdf"])
c(
    "?u=file%3A%2F%2F%2FUsers%2Falice%2FMy%2520F.pdf",
    "?u=My%20F.pdf",
    ["/Users/alice/My F.pdf"],
    "an encoded file URI",
)
c("file:///C:/build/r.txt", "r.txt", ["C:" + W + "build" + W + "r.txt"])
c("50% of /v1/models and 100%", "50% of /v1/models and 100%", [], "percent signs in prose")
c("%2Fv1%2Fmodels", "%2Fv1%2Fmodels", [], "encoded API route")
# --- 2c. Windows long-path and device prefixes
c(
    W + W + "?" + W + "C:" + W + "Users" + W + "bob" + W + "x.txt",
    "x.txt",
    ["C:" + W + "Users" + W + "bob" + W + "x.txt"],
    "long-path prefix stripped",
)
c(
    W + W + "?" + W + "UNC" + W + "server" + W + "share" + W + "x.txt",
    "x.txt",
    [W + W + "server" + W + "share" + W + "x.txt"],
    "long UNC prefix: a UNC path",
)
c(
    "see " + W + W + "." + W + "C:" + W + "Users" + W + "bob" + W + "y.txt.",
    "see y.txt.",
    ["C:" + W + "Users" + W + "bob" + W + "y.txt"],
    "device prefix",
)
c(
    W + "??" + W + "C:" + W + "Windows" + W + "z.dll",
    "z.dll",
    ["C:" + W + "Windows" + W + "z.dll"],
    "NT object prefix",
)
c(
    '"' + W * 4 + "?" + W * 2 + "C:" + W * 2 + "Users" + W * 2 + "bob" + W * 2 + 'j.txt"',
    '"j.txt"',
    ["C:" + W + "Users" + W + "bob" + W + "j.txt"],
    "JSON-escaped long-path prefix",
)
c("//?/C:/Users/bob/f.txt", "f.txt", ["C:" + W + "Users" + W + "bob" + W + "f.txt"])
c(
    W + W + "?" + W + "Volume{1b2c}" + W + "v.bin",
    "v.bin",
    [W + W + "?" + W + "Volume{1b2c}" + W + "v.bin"],
    "a volume GUID path keeps its prefix",
)
# --- 2d. letter case of roots
c("/USERS/alice/a.txt", "a.txt", ["/USERS/alice/a.txt"], "any case: as written for default roots")
c("/Home/bob/b.txt and /TMP/c.txt", "b.txt and c.txt", ["/Home/bob/b.txt", "/TMP/c.txt"])
c("/users/ALICE", "~", ["/users/ALICE"], "a home in any case")
c(
    "/Workspace/x.txt",
    "x.txt",
    ["/workspace/x.txt"],
    "a mount prefix in another case: its configured spelling",
)
c("/SRV/Agent/ARTIFACTS/r.pdf", "r.pdf", ["/srv/agent/artifacts/r.pdf"])
c(
    "c:" + W + "WORK" + W + "x.txt",
    "x.txt",
    ["C:" + W + "work" + W + "x.txt"],
    "Windows mount, other case",
)
# --- 2e. non-canonical separators
c("//Users//alice/x.txt", "x.txt", ["/Users/alice/x.txt"], "doubled slashes")
c("/Users/./alice/y.txt", "y.txt", ["/Users/alice/y.txt"], "dot segment")
c("/./Users/a/z.txt", "z.txt", ["/Users/a/z.txt"], "leading dot segment")
c("/srv//agent/./artifacts/k.txt", "k.txt", ["/srv/agent/artifacts/k.txt"])
c(
    "C:" + W + "Users" + W + W + "bob" + W + "." + W + "w.txt",
    "w.txt",
    ["C:" + W + "Users" + W + "bob" + W + "w.txt"],
    "Windows: doubled separator and dot segment",
)
c("https://home/x and ftp://tmp/y", "https://home/x and ftp://tmp/y", [], "://root is a URL host")
# --- 2f. a known root behind a known prefix, editor deep links
c(
    "/System/Volumes/Data/Users/alice/x.txt",
    "x.txt",
    ["/Users/alice/x.txt"],
    "macOS firmlink dropped",
)
c("/proc/123/root/home/bob/x.txt", "x.txt", ["/home/bob/x.txt"], "proc root dropped")
c("/proc/self/root/data/x.bin", "x.bin", ["/data/x.bin"], "any path behind proc root")
c("/proc/42/cwd/secret/x.log", "x.log", ["/proc/42/cwd/secret/x.log"])
c("open vscode://file/Users/alice/x.py:12 now", "open x.py now", ["/Users/alice/x.py"], "deep link")
c("vscode-insiders://file/Users/alice/x.py:12:3.", "x.py.", ["/Users/alice/x.py"])
c("[open](cursor://file/home/bob/main.rs)", "open (main.rs)", ["/home/bob/main.rs"])
c("windsurf://file/c:/Users/bob/a.ts", "a.ts", ["C:" + W + "Users" + W + "bob" + W + "a.ts"])
c(
    "myide://file/Users/alice/q.py",
    "myide:q.py",
    ["/Users/alice/q.py"],
    "unknown scheme: the path from //file on",
)
c("see https://file.example.com/x", "see https://file.example.com/x", [])
# --- 2g. per-user folders and variables
c("/media/alice/USB/x.txt", "x.txt", ["/media/alice/USB/x.txt"])
c("/media/alice", "~", ["/media/alice"], "a per-user media folder itself")
c("/run/user/1000/app/s.sock", "s.sock", ["/run/user/1000/app/s.sock"])
c("~alice/src/x.py", "x.py", ["~alice/src/x.py"], "tilde-user")
c("ask ~bob/ now", "ask ~ now", ["~bob"], "another user's home itself")
c("~bob", "~bob", [], "~word without a separator is prose")
c("$HOME/src/x.py", "x.py", ["~/src/x.py"], "$HOME becomes ~")
c("${HOME}/y.txt", "y.txt", ["~/y.txt"])
c("cd $HOME/proj/ && ls", "cd proj && ls", ["~/proj"])
c("%USERPROFILE%" + W + "Desktop" + W + "z.png", "z.png", ["~" + W + "Desktop" + W + "z.png"])
c("%HOMEPATH%" + W + "a.txt", "a.txt", ["~" + W + "a.txt"])
c("%HOMEDRIVE%%HOMEPATH%" + W + "b.txt", "b.txt", ["~" + W + "b.txt"])
c("$env:USERPROFILE" + W + "c.txt", "c.txt", ["~" + W + "c.txt"])
c("%APPDATA%" + W + "App" + W + "d.ini", "d.ini", ["%APPDATA%" + W + "App" + W + "d.ini"])
c("$TMPDIR/e.log", "e.log", ["$TMPDIR/e.log"])
c("echo $HOME and $5 and $HOME/", "echo $HOME and $5 and $HOME/", [], "variables alone")
# --- shell escapes
c(
    "cp /Users/alice/My" + B + " Files/s/a.txt .",
    "cp a.txt .",
    ["/Users/alice/My Files/s/a.txt"],
    "a shell-escaped space continues the path",
)
# --- 3. the replacement in the spelling of its context (links: see test_rewrite.py)
c(
    '{"p": "\\/tmp\\/say\\u0022hi.txt"}',
    '{"p": "say\\"hi.txt"}',
    ['/tmp/say"hi.txt'],
    "a name with a quote inside JSON text is escaped again",
)
c(
    "{" + B + '"p' + B + '": ' + B + '"~bob' + B * 3 + '"}',
    "{" + B + '"p' + B + '": ' + B + '"~' + B + '"}',
    ["~bob"],
    "JSON-in-JSON: the closing escape is given back even from the start's separator",
)
c(
    "in " + W + "Users" + W + "bob" + W + "d.txt",
    "in d.txt",
    [W + "Users" + W + "bob" + W + "d.txt"],
    "Windows path without a drive",
)
c("x %5CUsers%5Cbob", "x ~", [W + "Users" + W + "bob"], "percent-encoded, a home itself")
c("a " + W + "Users" + W + " b", "a " + W + "Users" + W + " b", [], "the anchor alone")
c(
    '"' + W * 2 + "Users" + W * 2 + "bob" + W * 2 + W + 'u62a5.txt"',
    '"报.txt"',
    [W * 2 + "Users" + W + "bob" + W + "报.txt"],
    "JSON-escaped drive-less path: every separator doubled, so JSON text",
)
c(
    W * 2 + "??" + W * 2 + "C:" + W * 2 + "bob" + W * 2 + "n.txt",
    "n.txt",
    ["C:" + W + "bob" + W + "n.txt"],
    "JSON-escaped NT prefix: its level-0 form has single backslashes",
)
# --- still not paths
c("GET /api/v1/users/list", "GET /api/v1/users/list", [], "API route with a root name inside")
c("http://example.com/Users/", "http://example.com/Users/", [])
c("https://host/home/x?p=1", "https://host/home/x?p=1", [])
c("ratio 1/2, and/or ../tmp/x", "ratio 1/2, and/or ../tmp/x", [])
c("x" + B + "/Users/a/b", "x" + B + "/Users/a/b", [], "escaped slash after a letter")
c("文件 C: drive", "文件 C: drive", [])
c("cost $5/month", "cost $5/month", [])
c("Ｕｓｅｒｓ／alice", "Ｕｓｅｒｓ／alice", [], "fullwidth: out of scope")
# --- boundaries glued to a word: flags, colour codes, strikethrough, configured roots
c(
    "gcc -I/home/alice/proj/include -L/srv/agent/artifacts/sub -o out main.c",
    "gcc -Iinclude -Lsub -o out main.c",
    ["/home/alice/proj/include", "/srv/agent/artifacts/sub"],
    "a flag glued to its value: '-' + letters at a boundary",
)
c(
    "-IC:" + B + "Users" + B + "bob" + B + "inc",
    "-Iinc",
    ["C:" + B + "Users" + B + "bob" + B + "inc"],
)
c('-I"C:' + B + "Users" + B + 'bob" x', '-I"~" x', ["C:" + B + "Users" + B + "bob"])
c("CFLAGS=-I/home/alice/inc make", "CFLAGS=-Iinc make", ["/home/alice/inc"])
c("--include/home/alice/x.h", "--includex.h", ["/home/alice/x.h"], "long flags too")
c("x-I/home/alice/b.h", "x-I/home/alice/b.h", [], "'-' inside a word is no flag")
c("a-b/home/x and-or/tmp/y", "a-b/home/x and-or/tmp/y", [])
c(
    "\x1b[1;34m/tmp/q/report.txt\x1b[0m",
    "\x1b[1;34mreport.txt\x1b[0m",
    ["/tmp/q/report.txt"],
    "ANSI colour code before the path",
)
c(
    '{"a":"' + B + "u001b[1;34m/tmp/q/report.txt" + B + 'u001b[0m"}',
    '{"a":"' + B + "u001b[1;34mreport.txt" + B + 'u001b[0m"}',
    ["/tmp/q/report.txt"],
    "JSON-escaped colour code; an escaped control character ends the path",
)
c(
    "\x1b[0;32mC:" + B + "Users" + B + "bob" + B + "r.txt\x1b[0m",
    "\x1b[0;32mr.txt\x1b[0m",
    ["C:" + B + "Users" + B + "bob" + B + "r.txt"],
)
c(
    'echo -e "' + B + '033[1m/home/bob/x.txt"',
    'echo -e "' + B + '033[1mx.txt"',
    ["/home/bob/x.txt"],
    "colour code spelled in a shell string",
)
c("[1;34m/tmp/q/b.txt", "[1;34m/tmp/q/b.txt", [], "no ESC: a word, not a colour code")
c(
    "~~/tmp/q/report.txt~~ and ~~/home/bob/a.txt~~.",
    "~~report.txt~~ and ~~a.txt~~.",
    ["/tmp/q/report.txt", "/home/bob/a.txt"],
    "markdown strikethrough: the closing ~~ is given back",
)
c(
    "x/srv/agent/artifacts/a.txt and ../data/artifacts/b.bin",
    "xa.txt and ..b.bin",
    ["/srv/agent/artifacts/a.txt", "/data/artifacts/b.bin"],
    "a multi-segment configured root names the layout even glued to a word",
)
c(
    "x/workspace/a.txt https://host.example/workspace/b",
    "x/workspace/a.txt https://host.example/workspace/b",
    [],
    "a one-segment configured root needs a boundary (common URL path)",
)
c("`a" + B + "b.txt`", "`a" + B + "b.txt`", [], "a backslash in a name is no JSON escape")
c(
    "`/tmp/q/a" + B + "b.txt`",
    "`b.txt`",
    ["/tmp/q/a" + B + "b.txt"],
    "never a JSON \\b (was a\\u0008.txt); a backslash separates the name",
)
# --- more spellings: Cygwin/MSYS, remote URIs, HTML references, variables, NT devices
c(
    "/cygdrive/c/Users/bob/x.txt and /c/Users/bob/y.txt",
    "x.txt and y.txt",
    ["/cygdrive/c/Users/bob/x.txt", "/c/Users/bob/y.txt"],
    "Cygwin and Git Bash / MSYS drive paths",
)
c("/d/Program Files/App/app.ini", "app.ini", ["/d/Program Files/App/app.ini"])
c("/c/Windows/System32/drivers", "drivers", ["/c/Windows/System32/drivers"])
c("/c/projects/x and /cygdrive", "/c/projects/x and /cygdrive", [], "not a Windows top folder")
c(
    "open vscode-remote://ssh-remote+host/home/bob/x.py now",
    "open x.py now",
    ["/home/bob/x.py"],
    "a remote editor URI: the path after the authority",
)
c(
    '"vscode-remote://wsl%2BUbuntu/srv/app/a.py"',
    '"a.py"',
    ["/srv/app/a.py"],
)
c("vscode-remote://host", "vscode-remote://host", [], "no path after the authority")
c(
    "&#x2F;home&#x2F;bob&#x2F;a.txt &#47;tmp&#47;q&#47;b.txt &sol;Users&sol;al&sol;c.txt",
    "a.txt b.txt c.txt",
    ["/home/bob/a.txt", "/tmp/q/b.txt", "/Users/al/c.txt"],
    "HTML character references for / (a markdown renderer shows slashes)",
)
c(
    "C:&#x5C;Users&#x5C;bob&#x5C;d.txt &bsol;&bsol;srv&bsol;share&bsol;e.txt",
    "d.txt e.txt",
    ["C:" + B + "Users" + B + "bob" + B + "d.txt", B + B + "srv" + B + "share" + B + "e.txt"],
    "... and for a backslash",
)
c("dir &#47;home&#47;bob&#47;; ok", "dir ~; ok", ["/home/bob"], "the ; of a trailing reference")
c("Tom &sol; Jerry &amp; &#47;tmp&#47;", "Tom &sol; Jerry &amp; &#47;tmp&#47;", [])
c('cd "$HOME"/proj/a.txt', 'cd "a.txt"', ["~/proj/a.txt"], "a quoted shell variable")
c(
    'cd "${HOME}"/proj && ls "$TMPDIR"/x',
    'cd "proj" && ls "x"',
    ["~/proj", "$TMPDIR/x"],
)
c('echo "$HOME" "$HOME"/', 'echo "$HOME" "$HOME"/', [], "a variable alone")
c(
    "${env:USERPROFILE}" + B + "proj" + B + "a.txt",
    "a.txt",
    ["~" + B + "proj" + B + "a.txt"],
    "PowerShell ${env:...}",
)
c(
    "%ProgramData%" + B + "App" + B + "cfg.ini and %WINDIR%" + B + "x.log",
    "cfg.ini and x.log",
    ["%ProgramData%" + B + "App" + B + "cfg.ini", "%WINDIR%" + B + "x.log"],
)
c(
    B + "Device" + B + "HarddiskVolume3" + B + "Users" + B + "bob" + B + "f.txt",
    "f.txt",
    [B + "Device" + B + "HarddiskVolume3" + B + "Users" + B + "bob" + B + "f.txt"],
    "NT device path",
)
c(
    "/home%2Fbob%2Fx.txt and /home" + B + "bob" + B + "proj" + B + "a.txt",
    "x.txt and a.txt",
    ["/home/bob/x.txt", "/home/bob/proj/a.txt"],
    "mixed spellings: the separator after the root decides",
)
c(
    "C:" + B + "Users&#x2F;bob&#x2F;x.txt C:" + B + "Users" + B + "bob" + B + "a%2Fsecret%2Fc.txt",
    "x.txt c.txt",
    [
        "C:" + B + "Users" + B + "bob" + B + "x.txt",
        "C:" + B + "Users" + B + "bob" + B + "a%2Fsecret%2Fc.txt",
    ],
    "a spelling that changes inside the path: no folder reaches the name",
)
c(
    "line" + B + "n/home" + B + "nmore",
    "line" + B + "n/home" + B + "nmore",
    [],
    "a root then a JSON escape is the root alone, not a mixed spelling",
)
c(
    "//cdn.example.com/x.js //host/share/y",
    "//cdn.example.com/x.js //host/share/y",
    [],
    "protocol-relative URLs: out of scope",
)
# --- a space-holding Windows top folder is one segment after every drive form
c(
    "Installed to C:" + B + "Program Files" + B + "App" + B + "bin" + B + "x.exe ok",
    "Installed to x.exe ok",
    ["C:" + B + "Program Files" + B + "App" + B + "bin" + B + "x.exe"],
    "the path does not end at the space of Program Files (the rest leaked)",
)
c(
    "C:/Program Files/App/a.ini, C:" + B + "Program Files (x86)" + B + "App" + B + "b.dll",
    "a.ini, b.dll",
    [
        "C:" + B + "Program Files" + B + "App" + B + "a.ini",
        "C:" + B + "Program Files (x86)" + B + "App" + B + "b.dll",
    ],
)
c(
    "C:"
    + B
    + "Documents and Settings"
    + B
    + "bob"
    + B
    + "c.txt and C:"
    + B
    + "Documents and Settings"
    + B
    + "bob",
    "c.txt and ~",
    [
        "C:" + B + "Documents and Settings" + B + "bob" + B + "c.txt",
        "C:" + B + "Documents and Settings" + B + "bob",
    ],
)
c(
    "/cygdrive/c/Program Files (x86)/App/x.txt /cygdrive/d/Documents and Settings/bob/y.txt",
    "x.txt y.txt",
    ["/cygdrive/c/Program Files (x86)/App/x.txt", "/cygdrive/d/Documents and Settings/bob/y.txt"],
)
c("/mnt/c/Program Files/App/w.txt", "w.txt", ["/mnt/c/Program Files/App/w.txt"], "WSL")
c(
    B + B + "?" + B + "C:" + B + "Program Files" + B + "App" + B + "d.txt",
    "d.txt",
    ["C:" + B + "Program Files" + B + "App" + B + "d.txt"],
)
c(
    "file:///C:/Program Files/App/e.txt",
    "e.txt",
    ["C:" + B + "Program Files" + B + "App" + B + "e.txt"],
)
c(
    "%SystemDrive%" + B + "Program Files" + B + "App" + B + "f.txt",
    "f.txt",
    ["%SystemDrive%" + B + "Program Files" + B + "App" + B + "f.txt"],
)
c(
    "C:" + B + "Program Files is big; C:" + B + "Programs Files" + B + "x",
    "Program Files is big; Programs Files" + B + "x",
    ["C:" + B + "Program", "C:" + B + "Programs"],
    "the folder alone or misspelt: the path ends at the space as before",
)
c(
    "C%3A%5CProgram%20Files%20%28x86%29%5CApp%5Ca.txt /c/Program" + B + " Files/App/b.txt "
    "vscode://file/C:/Program Files/App/c.txt:3",
    "a.txt b.txt c.txt",
    [
        "C:" + B + "Program Files (x86)" + B + "App" + B + "a.txt",
        "/c/Program Files/App/b.txt",
        "C:" + B + "Program Files" + B + "App" + B + "c.txt",
    ],
    "the folder's space percent-encoded or shell-escaped; an editor deep link",
)
c(
    "vscode-remote://ssh-remote+h/c/Documents and Settings/bob/d.txt",
    "d.txt",
    ["/c/Documents and Settings/bob/d.txt"],
)
# --- more Windows variables, any %NAME%\\ and shell defaults
c(
    "%SystemDrive%" + B + "App" + B + "a.txt %ProgramFiles(x86)%" + B + "App" + B + "b.txt",
    "a.txt b.txt",
    ["%SystemDrive%" + B + "App" + B + "a.txt", "%ProgramFiles(x86)%" + B + "App" + B + "b.txt"],
)
c(
    "%CommonProgramFiles(x86)%" + B + "c.dll %ProgramW6432%" + B + "App" + B + "d.exe "
    "%OneDriveConsumer%" + B + "Docs" + B + "e.txt",
    "c.dll d.exe e.txt",
    [
        "%CommonProgramFiles(x86)%" + B + "c.dll",
        "%ProgramW6432%" + B + "App" + B + "d.exe",
        "%OneDriveConsumer%" + B + "Docs" + B + "e.txt",
    ],
)
c(
    "%MyAppHome%" + B + "secret" + B + "f.txt",
    "f.txt",
    ["%MyAppHome%" + B + "secret" + B + "f.txt"],
    "any %NAME% then a backslash is a Windows folder variable",
)
c(
    "100%" + B + " done, 50%" + B + "x, %s%" + B + "n, %ab%" + B + "x, %FOO%" + B + "nope",
    "100%" + B + " done, 50%" + B + "x, %s%" + B + "n, %ab%" + B + "x, %FOO%" + B + "nope",
    [],
    "no variable: a digit, under three letters, or a JSON escape after it",
)
c(
    "${HOME:-/root}/proj/g.txt ${HOME:-x}/h.txt",
    "g.txt h.txt",
    ["~/proj/g.txt", "~/h.txt"],
    "a shell default inside the braces",
)
c("${HOME:-/root} alone", "${HOME:-/root} alone", [], "a variable alone")
# --- a flag after any boundary; every escape sequence ends a word
c(
    "\x1b[01m\x1b[K-I/home/bob/inc\x1b[m\x1b[K and \x1b[0m-L/srv/x/lib",
    "\x1b[01m\x1b[K-Iinc\x1b[m\x1b[K and \x1b[0m-Llib",
    ["/home/bob/inc", "/srv/x/lib"],
    "gcc's coloured output: a flag right after a colour code",
)
c("~~-L/home/bob/lib~~", "~~-Llib~~", ["/home/bob/lib"], "a flag after ~~")
c(
    B + "n-I/home/bob/a.h %20-L/tmp/q/b",
    B + "n-Ia.h %20-Lb",
    ["/home/bob/a.h", "/tmp/q/b"],
    "a flag after a JSON or a percent escape",
)
c(
    "\x1b[1m-IC:" + B + "Users" + B + "bob" + B + "inc",
    "\x1b[1m-Iinc",
    ["C:" + B + "Users" + B + "bob" + B + "inc"],
)
c(
    "x\x1b[0mx-I/home/bob/a and ~~x-L/home/bob/b",
    "x\x1b[0mx-I/home/bob/a and ~~x-L/home/bob/b",
    [],
    "a '-' inside a word is still no flag",
)
c(
    "\x1b(B\x1b[m/home/bob/a.txt \x1b7/tmp/q/b.txt\x1b8 \x1b(BC:"
    + B
    + "Users"
    + B
    + "bob"
    + B
    + "c.txt",
    "\x1b(B\x1b[ma.txt \x1b7b.txt\x1b8 \x1b(Bc.txt",
    ["/home/bob/a.txt", "/tmp/q/b.txt", "C:" + B + "Users" + B + "bob" + B + "c.txt"],
    "charset (tput sgr0) and cursor save/restore escapes",
)
c(
    "\x9b1;34m/tmp/q/a.txt " + B + "X1B[1m/tmp/q/b.txt " + B + "E[1m/tmp/q/c.txt ^[[1m/tmp/q/d.txt",
    "\x9b1;34ma.txt " + B + "X1B[1mb.txt " + B + "E[1mc.txt ^[[1md.txt",
    ["/tmp/q/a.txt", "/tmp/q/b.txt", "/tmp/q/c.txt", "/tmp/q/d.txt"],
    "8-bit CSI; textual ESC spellings (\\X1B, \\E, caret notation)",
)
c(
    B + "ev/tmp/q/a e7/tmp/q/b ^[a/tmp/q/c 1;34m/tmp/q/d",
    B + "ev/tmp/q/a e7/tmp/q/b ^[a/tmp/q/c 1;34m/tmp/q/d",
    [],
    "no ESC (\\e only before [): words",
)
# --- every editor's remote URIs, and VS Code's URL form of them
c(
    "open vscode://vscode-remote/ssh-remote+host/home/bob/proj/x.txt now",
    "open x.txt now",
    ["/home/bob/proj/x.txt"],
    "VS Code's URL form of a remote file",
)
c(
    "vscode://vscode-remote/wsl+Ubuntu/home/bob/a.py "
    "vscode-insiders://vscode-remote/ssh-remote+h/srv/app/b.py",
    "a.py b.py",
    ["/home/bob/a.py", "/srv/app/b.py"],
)
c(
    "vscode-insiders-remote://ssh-remote+h/home/bob/c.py cursor-remote://wsl+U/tmp/q/d.py",
    "c.py d.py",
    ["/home/bob/c.py", "/tmp/q/d.py"],
)
c(
    "vscode://vscode-remote/host cursor-remote://host xvscode://vscode-remote/h/home/bob/e",
    "vscode://vscode-remote/host cursor-remote://host xvscode://vscode-remote/h/home/bob/e",
    [],
    "no path after the authority; a scheme glued to a word",
)
# --- the NT namespace: any \\Device\\<name>, \\SystemRoot
c(
    B
    + "Device"
    + B
    + "HarddiskVolumeShadowCopy1"
    + B
    + "Users"
    + B
    + "bob"
    + B
    + "a.txt "
    + B
    + "Device"
    + B
    + "Mup"
    + B
    + "srv"
    + B
    + "share"
    + B
    + "b.txt",
    "a.txt b.txt",
    [
        B + "Device" + B + "HarddiskVolumeShadowCopy1" + B + "Users" + B + "bob" + B + "a.txt",
        B + "Device" + B + "Mup" + B + "srv" + B + "share" + B + "b.txt",
    ],
    "any NT device name",
)
c(
    B
    + "Device"
    + B
    + "CdRom0"
    + B
    + "setup"
    + B
    + "c.exe "
    + B
    + "Device"
    + B
    + "LanmanRedirector"
    + B
    + "srv"
    + B
    + "d.txt",
    "c.exe d.txt",
    [
        B + "Device" + B + "CdRom0" + B + "setup" + B + "c.exe",
        B + "Device" + B + "LanmanRedirector" + B + "srv" + B + "d.txt",
    ],
)
c(
    B
    + "SystemRoot"
    + B
    + "System32"
    + B
    + "e.dll "
    + B
    + "Device"
    + B
    + "HarddiskVolume3/Users/bob/f.txt",
    "e.dll f.txt",
    [
        B + "SystemRoot" + B + "System32" + B + "e.dll",
        B + "Device" + B + "HarddiskVolume3" + B + "Users" + B + "bob" + B + "f.txt",
    ],
    "\\SystemRoot; forward slashes after the device",
)
NOT_NT = B + "Devices" + B + "x " + B + "Device alone " + B + "SystemRootX" + B + "y "
NOT_NT += B + "Device" + B + "9x" + B + "z"
c(NOT_NT, NOT_NT, [], "not the NT namespace")
# --- HTML near-variants: escaped twice, no semicolon, an encoded tilde
c(
    "&amp;#x2F;home&amp;#x2F;bob&amp;#x2F;a.txt C:&amp;#x5C;Users&amp;#x5C;bob&amp;#x5C;b.txt",
    "a.txt b.txt",
    ["/home/bob/a.txt", "C:" + B + "Users" + B + "bob" + B + "b.txt"],
    "HTML-escaped twice (a renderer shows &#x2F;)",
)
c(
    "&#x2Fhome&#x2FSam&#x2Fx.txt &#47tmp&#47q&#47d.txt",
    "x.txt d.txt",
    ["/home/Sam/x.txt", "/tmp/q/d.txt"],
    "a numeric reference without its ; (HTML5 reads it) where no digit follows",
)
c(
    "&#126;/proj/e.txt &#x7E;&#x2F;proj&#x2F;f.txt &#126;bob/g.txt",
    "e.txt f.txt g.txt",
    ["~/proj/e.txt", "~/proj/f.txt", "~bob/g.txt"],
    "an HTML-encoded tilde",
)
c(
    "&#x2Fetc&#x2Fx &#4712 x &#47 y &#126;/ &tilde;/proj/h.txt a &amp;#x2F;tmp&amp;#x2F; b",
    "&#x2Fetc&#x2Fx &#4712 x &#47 y &#126;/ &tilde;/proj/h.txt a &amp;#x2F;tmp&amp;#x2F; b",
    [],
    "a hex digit after a bare reference makes another character; &tilde; is U+02DC; anchors alone",
)
# --- the known gaps of the third red-team pass, closed
c(
    "see C:"
    + B
    + "u005cProgram Files"
    + B
    + "u005cApp"
    + B
    + "u005ca.exe and C:"
    + B
    + "u002fProgram Files (x86)"
    + B
    + "u002fApp"
    + B
    + "u002fb.dll",
    "see a.exe and b.dll",
    [
        "C:" + B + "Program Files" + B + "App" + B + "a.exe",
        "C:" + B + "Program Files (x86)" + B + "App" + B + "b.dll",
    ],
    "a space-holding top folder after a \\u-escaped drive separator outside JSON",
)
c(
    "C:" + B + "." + B + "Program Files" + B + "App" + B + "b.dll, "
    "C:/./Documents and Settings/bob/c.txt",
    "b.dll, c.txt",
    [
        "C:" + B + "Program Files" + B + "App" + B + "b.dll",
        "C:" + B + "Documents and Settings" + B + "bob" + B + "c.txt",
    ],
    "a . segment before the space-holding top folder",
)
c(
    "C:"
    + B
    + "/Program Files"
    + B
    + "/App"
    + B
    + "/e.txt d:"
    + B
    + B
    + "/Program Files"
    + B
    + B
    + "/App"
    + B
    + B
    + "/f.txt",
    "e.txt f.txt",
    [
        "C:" + B + "Program Files" + B + "App" + B + "e.txt",
        "D:" + B + "Program Files" + B + "App" + B + "f.txt",
    ],
    "JSON-escaped slashes after the drive",
)
c(
    "%MyTool%"
    + B
    + "Program Files (x86)"
    + B
    + "App"
    + B
    + "d.txt %SystemDrive%"
    + B
    + "."
    + B
    + "Program Files"
    + B
    + "App"
    + B
    + "e.txt",
    "d.txt e.txt",
    [
        "%MyTool%" + B + "Program Files (x86)" + B + "App" + B + "d.txt",
        "%SystemDrive%" + B + "Program Files" + B + "App" + B + "e.txt",
    ],
    "any %NAME% before a space-holding top folder",
)
c(
    "C:" + B + "Program  Files" + B + "App" + B + "x.exe",
    "x.exe",
    ["C:" + B + "Program  Files" + B + "App" + B + "x.exe"],
    "a doubled space in the top folder (a typo) is read as one",
)
c(
    "&#126/proj/e.txt &amp;#126;/proj/f.txt &#x7E&#x2F;proj&#x2F;g.txt &amp;#x7e;bob/h.txt",
    "e.txt f.txt g.txt h.txt",
    ["~/proj/e.txt", "~/proj/f.txt", "~/proj/g.txt", "~bob/h.txt"],
    "an HTML-encoded tilde without its ; or escaped twice",
)
c(
    "&#1260/x &#x7Ebob/x &amp;#126/proj/x &#126; ok",
    "&#1260/x &#x7Ebob/x &amp;#126/proj/x &#126; ok",
    [],
    "a digit after a bare tilde reference makes another character; twice and bare: no",
)
c(
    B
    + "Device"
    + B
    + "NTPNP_PCI0015"
    + B
    + "x"
    + B
    + "a.sys "
    + B
    + "Device/HarddiskVolume3/Users/bob/b.txt "
    + B
    + "Device"
    + B
    + "Foo-Bar"
    + B
    + "c.txt",
    "a.sys b.txt c.txt",
    [
        B + "Device" + B + "NTPNP_PCI0015" + B + "x" + B + "a.sys",
        B + "Device" + B + "HarddiskVolume3" + B + "Users" + B + "bob" + B + "b.txt",
        B + "Device" + B + "Foo-Bar" + B + "c.txt",
    ],
    "NT device names with _ or -, and \\Device/",
)
c(
    "open vscode://vscode-remote/ssh-remote+host:22/home/bob/x.py and "
    "vscode-remote://ssh-remote+git@h.example:2222/srv/app/y.py",
    "open x.py and y.py",
    ["/home/bob/x.py", "/srv/app/y.py"],
    "a remote authority with a port",
)
c(
    B
    + "GLOBAL??"
    + B
    + "C:"
    + B
    + "Users"
    + B
    + "bob"
    + B
    + "a.txt "
    + B
    + "Global??"
    + B
    + "C:"
    + B
    + "Program Files"
    + B
    + "App"
    + B
    + "b.txt",
    "a.txt b.txt",
    [
        "C:" + B + "Users" + B + "bob" + B + "a.txt",
        "C:" + B + "Program Files" + B + "App" + B + "b.txt",
    ],
    "the object manager's \\GLOBAL??\\ (what \\??\\ names)",
)
c(
    B
    + "Device"
    + B
    + "HarddiskVolume3"
    + B
    + "Program Files"
    + B
    + "App"
    + B
    + "a.exe "
    + B
    + B
    + "?"
    + B
    + "Volume{12345678-abcd-1234-abcd-123456789abc}"
    + B
    + "Program Files (x86)"
    + B
    + "App"
    + B
    + "b.dll",
    "a.exe b.dll",
    [
        B + "Device" + B + "HarddiskVolume3" + B + "Program Files" + B + "App" + B + "a.exe",
        B
        + B
        + "?"
        + B
        + "Volume{12345678-abcd-1234-abcd-123456789abc}"
        + B
        + "Program Files (x86)"
        + B
        + "App"
        + B
        + "b.dll",
    ],
    "a volume without a drive letter reads its space-holding top folder whole",
)
c(
    B
    + B
    + "srv"
    + B
    + "C$"
    + B
    + "Program Files"
    + B
    + "App"
    + B
    + "c.txt "
    + B
    + B
    + "?"
    + B
    + "UNC"
    + B
    + "srv"
    + B
    + "share"
    + B
    + "Documents and Settings"
    + B
    + "bob"
    + B
    + "d.txt",
    "c.txt d.txt",
    [
        B + B + "srv" + B + "C$" + B + "Program Files" + B + "App" + B + "c.txt",
        B + B + "srv" + B + "share" + B + "Documents and Settings" + B + "bob" + B + "d.txt",
    ],
    "so does a share's root (an admin share, behind \\\\?\\UNC\\)",
)
c(
    B + "Device" + B + "NPF_{12345678-abcd-1234-abcd-123456789abc}" + B + "x" + B + "e.txt",
    "e.txt",
    [B + "Device" + B + "NPF_{12345678-abcd-1234-abcd-123456789abc}" + B + "x" + B + "e.txt"],
    "an NT device name with braces (Npcap)",
)
# --- a Windows body after a URI or a deep link (the fifth red-team pass)
c(
    "open vscode://file/" + B + B + "srv" + B + "share" + B + "new" + B + "a.txt:3 now",
    "open a.txt now",
    [B + B + "srv" + B + "share" + B + "new" + B + "a.txt"],
    "a share in an editor deep link: \\n of \\new is a separator",
)
c(
    "at file:///c%3A/Users/bob" + B + "new" + B + "b.txt now",
    "at b.txt now",
    ["C:" + B + "Users" + B + "bob" + B + "new" + B + "b.txt"],
    "a percent-encoded drive colon (VS Code's Uri.toString()), then backslashes",
)
c(
    "at file:///C|" + B + "Users" + B + "bob" + B + "repos" + B + "c.txt now",
    "at c.txt now",
    ["C:" + B + "Users" + B + "bob" + B + "repos" + B + "c.txt"],
    "the legacy drive C| of a file: URI",
)
c(
    "see subl://open?url=file:///c/Users/bob" + B + "new" + B + "d.txt now",
    "see subl://open?url=d.txt now",
    ["/c/Users/bob/new/d.txt"],
    "a Git Bash drive in a file: URI in a query, then backslashes",
)
c(
    "[x](/Users/a/a\\(1\\)/p/e.txt)",
    "x (e.txt)",
    ["/Users/a/a(1)/p/e.txt"],
    "a backslash-escaped bracket in a markdown link target is the path's",
)
# --- long
LONG = "/tmp/" + "d/" * 2500 + "final.txt"
c(
    "long " + LONG + ". after",
    "long final.txt. after",
    [],
    "overlong: only the name, resolver not asked",
)
c(
    'q "' + "/tmp/" + "x" * 5000 + ' tail"',
    'q "' + "x" * 255 + ' tail"',
    [],
    "overlong quoted falls back to prose, then overlong; the name is cut to 255 chars",
)
with open("tests/data/path_corpus.json", "w") as fh:
    json.dump(C, fh, ensure_ascii=False, indent=1)
print(len(C))
