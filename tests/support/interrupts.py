"""A generation that raises KeyboardInterrupt on its second call, as a Ctrl-C in the middle of scoring."""


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
