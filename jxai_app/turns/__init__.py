"""A running turn: agent loop → chat store → every socket, on any worker (docs/turns.md).

Modules, bottom up (each imports only those above it; docs/architecture.md "Floors")::

    delivery.py  frames to sockets: in-process, or through the channel layer to every worker
    framing.py   how large an outgoing message may be: events batches by size, chunk frames
    replay.py    ReplayLog: a running turn's events, compact, replayed exactly
    limits.py    TurnLimits: each round's tokens reserved, the answer cut at JXAI_MAX_ANSWER_CHARS
    clients.py   turn_client(): the streaming client of one turn, every layer built in one place
    observe.py   what one turn tells operators: metrics, spans, log context
    frames.py    frames read from the database: snapshot, message_saved, conversation
    hub.py       TurnHub: one worker's runners, their leases, delivery, jobs and drain
    plan.py      TurnPlan: what a turn's runner is given
    runner.py    TurnRunner: one turn as a task (seq numbering, the store's writes, retries)
    start.py     send, edit, regenerate, retry, resume: a plan in one database hop; launch()
    control.py   Stop, approval decisions and expiry, branch switch, rename, delete
    recovery.py  LeaseWatch: turns whose worker died are recovered and their tabs told
    worker.py    get_hub(): this worker's hub, with its lease watch, drained on SIGTERM
    snapshots.py snapshot_for(): a socket's snapshot, built once in the worker's slot and shared
    session.py   Session: one socket's ordered output, sequencer and requests
    httpturn.py  POST /ai/chat?conversation=…: a saved conversation's turn as SSE
"""
