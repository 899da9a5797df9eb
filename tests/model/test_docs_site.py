"""The documentation site reads offline: the walkthrough's formulas are MathML, made when the site is
built (docs/hooks/mathml.py), and no page loads a script, a stylesheet or a font from the network.

Three levels: the hook on every formula of docs/walkthrough.py (always); the built site's HTML
(needs mkdocs, the ``docs`` extra: ``.ci/run`` installs it before the suite); the built walkthrough
drawn by a real browser (needs chromium, skipped without it). ``NUMPY_TRANSFORMER_SITE=DIR`` checks
a site already built into DIR instead of building one (about 30 s).
"""

import html
import importlib.util
import json
import re
import shutil
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

jupytext = pytest.importorskip(
    "jupytext", reason="the documentation tests need the dev extra: pip install -e '.[dev]'"
)

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "mathml.py"
WALKTHROUGH = ROOT / "docs" / "walkthrough.py"
# what a formula left for a script to render looks like: a dollar, or \( ... \) and \[ ... \]
RAW = re.compile(r"\$|\\\(|\\\[")
# anything a page would fetch from another host when it is opened (links to read are fine)
REMOTE = re.compile(
    r"<script[^>]*\bsrc=\"(https?:)?//|<link[^>]*\bhref=\"(https?:)?//[^\"]*\"[^>]*>|@import\s+url\((https?:)?//"
    r"|MathJax\.js|katex(\.min)?\.js"
)


def load_hook():
    spec = importlib.util.spec_from_file_location("mathml_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def text_outside_code_and_math(fragment: str) -> str:
    """A cell's visible text, less its code and its MathML: where a raw formula would show."""
    fragment = re.sub(r"<math\b.*?</math>|<pre\b.*?</pre>|<code\b.*?</code>", " ", fragment, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def markdown_cells(page: str) -> list[str]:
    cells = re.split(r'(?=<div class="jp-Cell )', page)
    return [cell for cell in cells if cell.startswith('<div class="jp-Cell jp-MarkdownCell')]


def test_the_hook_turns_every_formula_of_the_walkthrough_into_mathml():
    hook = load_hook()
    sources = [cell.source for cell in jupytext.read(WALKTHROUGH).cells if cell.cell_type == "markdown"]
    formulas = sum(len(re.findall(r"\$\$.+?\$\$|\$.+?\$", source, flags=re.S)) for source in sources)
    assert formulas > 100
    # each markdown cell as nbconvert leaves it for a script: HTML-escaped text, the LaTeX untouched
    page = "".join(f'<div class="jp-Cell jp-MarkdownCell">{html.escape(s)}</div>' for s in sources)
    rendered = hook.render_notebook(page)
    assert rendered.count("<math") == formulas
    assert rendered.count('display="block"') == sum(source.count("$$") // 2 for source in sources)
    for cell in markdown_cells(rendered):
        assert not RAW.search(text_outside_code_and_math(cell)), cell[:300]


def test_the_hook_leaves_code_alone_and_names_a_formula_it_cannot_read():
    hook = load_hook()
    cell = '<div class="jp-Cell jp-MarkdownCell"><p>$x$ costs <code>$5</code></p><pre>a = "$b$"</pre></div>'
    rendered = hook.render_notebook(cell)
    assert "<code>$5</code>" in rendered and '<pre>a = "$b$"</pre>' in rendered
    assert rendered.count("<math") == 1
    code_cell = '<div class="jp-Cell jp-CodeCell"><span>print("$x$")</span></div>'
    assert hook.render_notebook(code_cell) == code_cell
    with pytest.raises(ValueError, match=r"\$\\left\( x\$"):
        hook.render_notebook('<div class="jp-Cell jp-MarkdownCell">$\\left( x$</div>')


def test_the_hook_leaves_links_alone_and_never_makes_a_formula_s_text_html():
    hook = load_hook()
    link = '<a href="https://example.org/?a=$1&amp;b=$2">a $ link</a>'
    cell = f'<div class="jp-Cell jp-MarkdownCell"><p>{link} and $x$</p></div>'
    rendered = hook.render_notebook(cell)
    assert link in rendered and rendered.count("<math") == 1
    text = hook.render_notebook(
        '<div class="jp-Cell jp-MarkdownCell">$\\text{&lt;b&gt;bold&lt;/b&gt;} + a \\&amp; b$</div>'
    )
    assert "<b>" not in text and "<mtext>&lt;b&gt;bold&lt;/b&gt;</mtext>" in text and "<mi>&amp;</mi>" in text


@pytest.mark.parametrize(
    "formula, reason",
    [
        ("$\\fracc{a}{b}$", r"\$\\fracc\{a\}\{b\}\$ cannot be converted to MathML: unknown \\fracc"),
        ("$\\softmax(x) + \\frac{1}{2}$", r"unknown \\softmax$"),
        ("$ $", r"^the formula \$ \$ is empty$"),
    ],
)
def test_the_hook_fails_naming_an_unknown_command_or_an_empty_formula(formula, reason):
    with pytest.raises(ValueError, match=reason):
        load_hook().render_notebook(f'<div class="jp-Cell jp-MarkdownCell">{formula}</div>')


def test_the_built_walkthrough_holds_mathml_and_no_raw_formula(site):
    page = (site / "walkthrough" / "index.html").read_text()
    cells = markdown_cells(page)
    assert len(cells) > 10
    for cell in cells:
        assert not RAW.search(text_outside_code_and_math(cell)), cell[:300]
    assert page.count("<math") > 100


def test_no_page_fetches_anything_from_the_network(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    offenders = {
        str(p.relative_to(site)): m.group(0)[:120] for p in pages if (m := REMOTE.search(p.read_text()))
    }
    assert not offenders


# Loads the walkthrough in a frame of the same origin and measures what the browser drew: each
# fraction's numerator above its denominator is MathML laid out as mathematics, not as inline text.
CHECK_PAGE = """<!doctype html><html><body>
<iframe id="f" src="/walkthrough/" style="width:1280px;height:2000px"></iframe>
<script>
document.getElementById("f").onload = () => {
  const d = document.getElementById("f").contentDocument;
  const fractions = [...d.querySelectorAll("mfrac")];
  const stacked = fractions.filter(m => {
    const top = m.children[0].getBoundingClientRect(), bottom = m.children[1].getBoundingClientRect();
    return top.height > 0 && top.bottom <= bottom.top + 1;
  }).length;
  let raw = 0;
  for (const cell of d.querySelectorAll(".jp-MarkdownCell")) {
    const copy = cell.cloneNode(true);
    copy.querySelectorAll("math, pre, code").forEach(e => e.remove());
    if (/\\$|\\\\\\(|\\\\\\[/.test(copy.textContent)) raw += 1;
  }
  document.body.setAttribute("data-result", JSON.stringify({
    math: d.querySelectorAll("math").length, fractions: fractions.length, stacked: stacked, raw: raw}));
};
</script></body></html>"""


class _Site(SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/__check__.html":
            return super().do_GET()
        body = CHECK_PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_browser_draws_the_walkthrough_formulas_offline(site, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("no chromium on PATH (apt-get install chromium): the browser's rendering is not checked")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Site, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        shown = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--virtual-time-budget=20000",
                "--dump-dom",
                f"http://127.0.0.1:{server.server_address[1]}/__check__.html",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()
    found = re.search(r'data-result="([^"]*)"', shown.stdout)
    assert found, shown.stderr[-2000:]
    result = json.loads(html.unescape(found.group(1)))
    assert result["math"] > 100
    assert result["raw"] == 0
    assert result["fractions"] > 5 and result["stacked"] == result["fractions"], result
