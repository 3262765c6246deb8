package join

import "golang.org/x/sys/unix"

// abis on x86_64: native, i386 (int 0x80) and x32 (refused whole).
var abis = []abi{
	{arch: unix.AUDIT_ARCH_X86_64, unshare: 272, clone: 56, clone3: 435, refuseAbove: 0x40000000},
	{arch: unix.AUDIT_ARCH_I386, unshare: 310, clone: 120, clone3: 435, refuseAbove: 0xffffffff},
}
