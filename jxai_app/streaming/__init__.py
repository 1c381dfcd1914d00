"""``python -m jxai_app.streaming``: the streaming command line's documented name (SPEC §2);
the client and the command live in :mod:`jxai_app.core.streaming`."""
