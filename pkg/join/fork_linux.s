// This file is empty on purpose: an assembly file in the package is what
// lets fork_linux.go declare the runtime's fork hooks without bodies.
