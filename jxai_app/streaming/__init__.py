"""``python -m jxai_app.streaming``: the streaming command line's documented name (docs/streaming.md
"The command line");
the client and the command live in :mod:`jxai_app.core.streaming`."""
