"""The reproduction study built on the toolkit: the papers' published numbers, the prepare → train → test pipeline
of ``make train`` / ``make reproduce``, the report (JSON, Markdown, plots), attention plots and the paper-scale
training-time estimate.

The core of ``nmt`` (data, modules, model, training, search, translation, evaluation, checkpoints, config) never
imports this package; only the command-line layer (``nmt.commands``) and ``scripts/`` do
(``tests/test_structure.py`` checks it).
"""
