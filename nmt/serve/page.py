"""The service's web page: a text box, a button, the translation and the model's name (``GET /``)."""

from __future__ import annotations

import html

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nmt: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; }}
textarea {{ width: 100%; min-height: 6rem; font-size: 1rem; }}
#output {{ white-space: pre-wrap; border: 1px solid #ccc; padding: .5rem; min-height: 3rem; margin-top: 1rem; }}
.error {{ color: #a00; }}
</style>
</head>
<body>
<h1>Translate {title}</h1>
<p>Model: <span id="model">{model}</span> ({precision})</p>
<label for="source">One sentence per line:</label>
<textarea id="source" autofocus></textarea>
<button id="translate" type="button">Translate</button>
<div id="output" aria-live="polite"></div>
<script>
const button = document.getElementById("translate");
const output = document.getElementById("output");
button.addEventListener("click", async () => {{
  const lines = document.getElementById("source").value.split("\\n").filter(l => l.trim() !== "");
  if (lines.length === 0) {{ output.textContent = ""; return; }}
  button.disabled = true;
  output.className = "";
  output.textContent = "…";
  try {{
    const response = await fetch("translate", {{method: "POST", headers: {{"Content-Type": "application/json"}},
                                             body: JSON.stringify({{text: lines}})}});
    const answer = await response.json();
    if (!response.ok) {{ output.className = "error"; output.textContent = answer.error; }}
    else {{ output.textContent = answer.translations.map(t => t.text).join("\\n"); }}
  }} catch (error) {{
    output.className = "error";
    output.textContent = String(error);
  }} finally {{
    button.disabled = false;
  }}
}});
</script>
</body>
</html>
"""


def render(title: str, model: str, precision: str) -> str:
    """The page for a model (every value HTML-escaped)."""
    return PAGE.format(title=html.escape(title), model=html.escape(model), precision=html.escape(precision))
