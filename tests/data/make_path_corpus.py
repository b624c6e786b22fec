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
    ["/Users/alice/out/"],
    "directory: last segment",
)
c("home is /Users/alice", "home is ~", ["/Users/alice"], "home dir never shows the user name")
c("home is /home/bob/ ok", "home is ~ ok", ["/home/bob/"])
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
c("file:///C:/Users/bob/x.png", "x.png", ["C:/Users/bob/x.png"])
c("file://server/share/doc.txt", "doc.txt", ["//server/share/doc.txt"])
c("profile:///x", "profile:///x", [], "file: inside a word")
c("file:// nothing", "file:// nothing", [])
# --- Windows drives
c(
    "C:" + B + "Users" + B + "bob" + B + "plot.png",
    "plot.png",
    ["C:" + B + "Users" + B + "bob" + B + "plot.png"],
)
c("Saved C:/Users/bob/out/r.docx, ok", "Saved r.docx, ok", ["C:/Users/bob/out/r.docx"])
c("d:" + B + "data" + B + "x.csv", "x.csv", ["d:" + B + "data" + B + "x.csv"])
c(
    "C:" + B + "Program Files" + B + "App" + B + "a.exe",
    "Program Files" + B + "App" + B + "a.exe",
    ["C:" + B + "Program"],
    "prose: space ends it",
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
    "[report](report.pdf)",
    ["/Users/alice/out/report.pdf"],
    "markdown link target",
)
c("[report](/tmp/a b.pdf)", "[report](a b.pdf)", ["/tmp/a b.pdf"])
c(
    "[/tmp/x.pdf](/tmp/x.pdf)",
    "[x.pdf](x.pdf)",
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
