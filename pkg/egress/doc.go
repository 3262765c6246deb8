// Package egress is the sandbox's only way out to the network.
//
// The sandbox owns a network namespace that holds nothing but loopback. The
// daemon holds one [Wiring] for it: planned before the sandbox exists (where
// each peer is offered, the hosts file and apt configuration of the agent's
// view), then started with a way to make listening sockets inside the
// namespace, which it serves from the daemon's own namespace, and asked to
// open each visit. What it serves:
//
//   - [Proxy] is an HTTP/1.1 forward proxy with CONNECT that enforces a
//     [Policy]: which names may be reached ([Public], [Allowlist],
//     [NoNetwork]) and, for every resolved address, that it is globally
//     reachable (no loopback, private, link-local, metadata or reserved
//     ranges, also under [Public]). It resolves each name once and dials only
//     the addresses it checked, so DNS rebinding cannot redirect it.
//   - [Visitor] holds the visitor port for the sandbox's whole life and
//     answers only while a visit (the verifier, a healthcheck) is open, under
//     that visit's own policy and token.
//   - [ServePeer] splices a port inside the sandbox to a declared service on
//     the substrate.
//   - [ProxyEnv] and [AptProxyConfig] tell the sandbox's programs where the
//     proxy is, and [Audit] records every decision.
//
// The proxy speaks HTTP/1.1 through its own codec, internal/http1, instead of
// net/http: it must refuse ambiguous framing (request smuggling), drop every
// hop-by-hop header in both directions, and validate an upstream response
// completely before it writes a byte of it to the client.
package egress
