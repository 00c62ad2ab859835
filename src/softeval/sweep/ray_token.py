"""Joining a Ray cluster at HOST:PORT that uses token authentication.

Newer Ray (2.5x and later) turns token authentication on in ``ray start --head`` when the machine
holds a token (``~/.ray/auth_token``, which a local ``ray.init`` such as a sweep without ``--address``
writes), and a driver uses its token only for ``--address auto``, not for an explicit HOST:PORT: there
Ray retries for ~20 s, logging ``Unauthenticated`` each second, and fails with "Failed to connect". So
the sweep uses this machine's token for HOST:PORT too (an open cluster accepts it), after asking the
cluster once (10 ms) whether it lets this machine in; if not, one line names the fix. Docs:
docs/reference/sweeps.md.
"""

from __future__ import annotations

import contextlib
import os

from softeval.errors import UserError

AUTH_MODE = "RAY_AUTH_MODE"  # Ray's switch: token | disabled


def use_token_if_any(address: str, timeout: float = 5.0) -> None:
    """Before ``ray.init(address=HOST:PORT)``: with a Ray token on this machine, use it
    (``RAY_AUTH_MODE=token`` for this process); a UserError when the cluster refuses this machine.
    Nothing to do for ``auto`` (Ray does the same itself), ``ray://`` (Ray Client), an explicit
    RAY_AUTH_MODE, or a Ray without token authentication."""
    if address == "auto" or "://" in address or os.environ.get(AUTH_MODE):
        return
    try:
        from ray._raylet import AuthenticationTokenLoader, Config  # lazy: ray is slow to import
    except ImportError:
        return
    has_token = AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)
    if has_token:
        os.environ[AUTH_MODE] = "token"
        Config.initialize("")  # Ray reads the mode from its cached config: refresh it, as Ray itself does
    if _lets_in(address, timeout):
        return
    if has_token:
        del os.environ[AUTH_MODE]
        Config.initialize("")
    why = ("refuses this machine's Ray token (~/.ray/auth_token or RAY_AUTH_TOKEN: another cluster's)"
           if has_token else "uses token authentication and this machine has no Ray token")
    raise UserError(f"the Ray cluster at {address} {why}: copy the head node's ~/.ray/auth_token to this "
                    "machine (or set RAY_AUTH_TOKEN to its content), see 'A Ray cluster' in docs/reference/sweeps.md")


def _lets_in(address: str, timeout: float) -> bool:
    """False only when the cluster's GCS answers 'unauthenticated'; any other failure is left to
    ``ray.init`` to report. Ray's C++ client logs the refusal on stderr: kept off the user's screen."""
    from ray._raylet import InnerGcsClient
    from ray.exceptions import AuthenticationError, RayError

    try:
        with _stderr_muted():
            InnerGcsClient.standalone(address, None, int(timeout * 1000))
    except AuthenticationError:
        return False
    except RayError:  # not ours to judge: ray.init reports it in full
        pass
    return True


@contextlib.contextmanager
def _stderr_muted():
    """File descriptor 2 to /dev/null for the block (a C++ library's log lines, not Python's)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
