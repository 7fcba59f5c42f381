"""The dashboard's HTML: server-rendered, escaped at every value, no build step.

Sections marked ``data-live`` are refreshed in place every few seconds by a
few lines of JavaScript (paused while the tab is hidden); forms sit outside
them, so typing is never interrupted. Colours are CSS variables with a dark
variant chosen by ``prefers-color-scheme``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

__all__ = ["Raw", "chart", "e", "layout", "link", "live", "table"]

REFRESH_MS = 3000

_CSS = """
:root { --bg:#fff; --fg:#1d2330; --muted:#5b6475; --line:#d9dde5; --accent:#1f5fbf;
  --ok:#1a7f37; --bad:#c62828; --warn:#9a6700; --card:#f6f8fa; }
@media (prefers-color-scheme: dark) {
  :root { --bg:#0f1419; --fg:#e6e9ef; --muted:#9aa4b2; --line:#2d3440; --accent:#6ea8fe;
    --ok:#4ac26b; --bad:#ff7b72; --warn:#d29922; --card:#161b22; } }
body { background:var(--bg); color:var(--fg); font:14px/1.45 system-ui,sans-serif; margin:0; }
header { display:flex; gap:1.2em; align-items:center; padding:.6em 1.2em;
  border-bottom:1px solid var(--line); background:var(--card); flex-wrap:wrap; }
header a { color:var(--fg); text-decoration:none; } header a.on { color:var(--accent);
  font-weight:600; } header b { margin-right:1em; }
main { padding:1em 1.2em; max-width:1200px; }
a { color:var(--accent); }
table { border-collapse:collapse; margin:.4em 0 1.2em; }
th, td { border-bottom:1px solid var(--line); padding:.25em .7em; text-align:left; }
td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
.muted { color:var(--muted); } .bad { color:var(--bad); } .ok { color:var(--ok); }
.cards { display:flex; gap:1em; flex-wrap:wrap; }
.card { background:var(--card); border:1px solid var(--line); border-radius:6px;
  padding:.6em 1em; min-width:16em; }
svg.chart polyline { fill:none; stroke-width:1.5; } svg.chart .p { stroke:var(--ok); }
svg.chart .f { stroke:var(--bad); } svg.chart { background:var(--bg);
  border:1px solid var(--line); }
form.inline { display:inline; } input, select, button { font:inherit; color:var(--fg);
  background:var(--bg); border:1px solid var(--line); border-radius:4px; padding:.2em .4em; }
button { cursor:pointer; } button.danger { border-color:var(--bad); color:var(--bad); }
pre { background:var(--card); padding:.6em; overflow:auto; border-radius:4px; }
"""

_JS = """
(function () {
  const every = EVERY_MS;
  async function refresh() {
    if (document.hidden) return;
    const live = document.querySelectorAll('[data-live]');
    if (!live.length) return;
    try {
      const r = await fetch(location.href, {credentials: 'same-origin'});
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
      live.forEach(function (el) {
        const fresh = doc.getElementById(el.id);
        if (fresh) el.innerHTML = fresh.innerHTML;
      });
      document.body.dataset.refreshed = String(Date.now());
    } catch (err) { /* offline for a moment: try again next tick */ }
  }
  setInterval(refresh, every);
  document.addEventListener('visibilitychange', function () { if (!document.hidden) refresh(); });
})();
""".replace("EVERY_MS", str(REFRESH_MS))

NAV = (
    ("", "Overview"),
    ("leasekeepers", "Leasekeepers"),
    ("dlq", "Dead letters"),
    ("scheduled", "Scheduled"),
    ("job", "Job"),
)


def e(value: object) -> str:
    """Any value as escaped HTML text."""
    return escape(str(value), quote=True)


def link(base: str, path: str, text: object, **attrs: str) -> str:
    extra = "".join(f' {k}="{e(v)}"' for k, v in attrs.items())
    return f'<a href="{e(base + "/" + path)}"{extra}>{e(text)}</a>'


def layout(*, title: str, base: str, active: str, body: str, read_only: bool) -> str:
    nav = " ".join(
        link(base, path, name, **({"class": "on"} if path == active else {})) for path, name in NAV
    )
    mode = ' <span class="muted">(read-only)</span>' if read_only else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · job queue</title><style>{_CSS}</style></head><body>"
        f"<header><b>job queue</b>{nav}{mode}</header>"
        f"<main><h1>{e(title)}</h1>{body}</main><script>{_JS}</script></body></html>"
    )


def live(section_id: str, inner: str) -> str:
    """A section the page refreshes in place."""
    return f'<section id="{e(section_id)}" data-live>{inner}</section>'


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, numeric: Sequence[int] = ()
) -> str:
    """A table of escaped cells; a cell that is a ``Raw`` is inserted as it is."""
    head = "".join(
        f'<th class="n">{e(h)}</th>' if i in numeric else f"<th>{e(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="n">{_cell(c)}</td>' if i in numeric else f"<td>{_cell(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        return '<p class="muted">none</p>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Raw(str):
    """HTML that was built from escaped parts already (a link, a form)."""

    __slots__ = ()


def _cell(value: object) -> str:
    return str(value) if isinstance(value, Raw) else e(value)


def chart(processed: Sequence[float], failed: Sequence[float], width: int = 320) -> str:
    """A small SVG line chart of jobs/s: processed (green) and failed (red)."""
    height = 60
    top = max([1.0, *processed, *failed])

    def points(values: Sequence[float]) -> str:
        if not values:
            return ""
        step = width / max(1, len(values) - 1)
        return " ".join(
            f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}"
            for i, v in enumerate(values)
        )

    return (
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="jobs per second, peak {top:.1f}">'
        f'<polyline class="p" points="{points(processed)}"/>'
        f'<polyline class="f" points="{points(failed)}"/></svg>'
    )
