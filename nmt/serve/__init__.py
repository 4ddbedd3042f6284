"""``nmt serve``: a trained model as an HTTP translation service with a web page (Starlette on uvicorn).

:mod:`~nmt.serve.requests` reads and checks a request body, :mod:`~nmt.serve.batcher` decodes the sentences of
concurrent requests together, :mod:`~nmt.serve.app` holds the routes and :mod:`~nmt.serve.page` the page. The service
sits above the core, beside the command line: it uses :class:`nmt.inference.translator.Translator` and nothing in
the core imports it.
"""
