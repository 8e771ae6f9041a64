"""reasoning-proxy: an OpenAI-compatible reverse proxy that keeps a model's
reasoning apart from its answer, stores it per conversation, and sends it
back upstream (or strips it) as each upstream needs.

One exchange path, from the top down: `cli` starts `serving`, which runs the
`app`; the app dispatches to the front doors in `api/`; a door asks the
planner (`exchange`) for an Exchange (settings, route, history plan, upstream
body and headers), sends it through `upstream/`, normalizes the answer with
the sans-IO core in `reasoning/`, and hands the finished turn to `history`,
which keeps it in a store (`stores/`). Nothing is created at import time:
`create_app(config)` builds everything from a Config value.
"""


def package_version() -> str:
    """The installed distribution's version (a source tree not installed says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reasoning-proxy")
    except PackageNotFoundError:
        return "unknown (not installed)"
