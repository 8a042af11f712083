package reboundmcp

import "syscall"

// dieWithParent has the kernel SIGKILL the child when rebound ends,
// however it ends: killed with SIGKILL, or by the OOM killer, rebound
// can end nothing itself, and a server that does not exit when its
// stdin closes would run on with no one to end it. SIGKILL, not SIGTERM:
// nobody is left to follow up a SIGTERM the server ignores. The signal
// goes to the child alone; what it spawned in its process group is told
// only by its own pipes' ends. The kernel sends it when the thread that
// started the child ends, which child.run makes the child's last.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
