#include "textflag.h"

// func rawVfork(flags uintptr) (pid uintptr, errno uintptr)
//
// clone(2) with the flags given, on the caller's stack. With CLONE_VM and
// CLONE_VFORK the child runs on this very stack while the caller sleeps in
// the system call, and it will overwrite what lies below the caller's
// frame, this function's return address included. So the return address
// is kept in R12, which the kernel preserves and both processes get a copy
// of, and put back on the stack after the call, in each of them.
TEXT ·rawVfork(SB),NOSPLIT|NOFRAME,$0-24
	MOVQ	flags+0(FP), DI
	MOVQ	$0, SI	// the stack: the caller's
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX	// SYS_clone
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$0, pid+8(FP)
	NEGQ	AX
	MOVQ	AX, errno+16(FP)
	RET
ok:
	MOVQ	AX, pid+8(FP)
	MOVQ	$0, errno+16(FP)
	RET
