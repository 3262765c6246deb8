package join

import "golang.org/x/sys/unix"

// abis on arm64: native and 32-bit ARM.
var abis = []abi{
	{arch: unix.AUDIT_ARCH_AARCH64, unshare: 97, clone: 220, clone3: 435, refuseAbove: 0xffffffff},
	{arch: unix.AUDIT_ARCH_ARM, unshare: 337, clone: 120, clone3: 435, refuseAbove: 0xffffffff},
}
