"""Child processes that die with the process that started them (tests, the demo).

Linux's PR_SET_PDEATHSIG, set by util-linux `setpriv` right before it execs the command — not
by a `preexec_fn`: a child that runs Python code between fork and exec makes `subprocess` use
fork() instead of vfork(), and fork() runs every library's fork handlers in the child; gRPC's
(loaded with Pulumi's SDK) restarts its poller thread there, which then aborts on the
descriptors the child closes (seen in CI: etcd "exited with -6", the log holding only gRPC's
"epoll_wait error: Bad file descriptor")."""

import shutil


def tied_to_parent(command: list[str]) -> list[str]:
    """`command`, sent SIGTERM when the thread that starts it ends (without `setpriv`: as is)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *command] if setpriv else command
