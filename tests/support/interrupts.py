"""Ctrl-C stand-ins: a generation that raises KeyboardInterrupt on its second call (in the middle of scoring), and
any function raising it right after its n-th call has done its work."""


def interrupt_second_generate(monkeypatch):
    from softeval.lm import generation

    real, calls, raised = generation.generate, [], []

    def flaky(lm, seqs, **kw):
        calls.append(len(seqs))
        if len(calls) == 2 and not raised:
            raised.append(True)
            raise KeyboardInterrupt
        return real(lm, seqs, **kw)

    monkeypatch.setattr(generation, "generate", flaky)
    return calls


def interrupted_after(real, at: int):
    """``real``, raising KeyboardInterrupt right after its ``at``-th call has done its work (a Ctrl-C then)."""
    calls = []

    def wrapper(*args, **kw):
        out = real(*args, **kw)
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return out
    return wrapper
