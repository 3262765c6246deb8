// Package task is the Harbor task model: it reads a task directory
// (task.toml, instruction.md, tests/test.sh, solution/solve.sh, environment/,
// and sandboxd's own sandboxd.toml) into plain data, so that serve, grade,
// trial and adapt all see one interpretation of a task. It only reads files;
// it never runs anything, and it reads the host environment only through the
// lookup function given to ExpandEnv.
//
// # task.toml
//
// Schema versions 1.0 to 1.4 are read in full, as Harbor documents them
// today, with Harbor's defaults and legacy spellings: `version` for
// `schema_version`, `allow_internet = true|false` for `network_mode =
// "public"|"no-network"`, `memory = "2G"` and `storage = "10G"` for memory_mb
// and storage_mb. A phase without its own network_mode inherits the
// environment's (AgentNetwork, VerifierNetwork); allowed_hosts without a
// network_mode means an allowlist, as in Harbor. When both network_mode and
// allow_internet are written, network_mode wins; allow_internet = false
// beside a network_mode that lets traffic out is an error rather than a
// guess.
//
// Every key of schema 1.4 is honoured or refused when the task is loaded —
// by serve, trial and adapt alike, since all three call Load — and a
// refusal names the key (*UnsupportedError, matching ErrUnsupported, with
// file:line: key). The keys, and the test that shows each:
//
//	key                                        what sandboxd does                              pinned by
//	schema_version, version (legacy)           read; an unknown version warns                  TestParse_VersionKeys
//	source                                     read                                            TestLoad_SchemaVersions
//	artifacts (paths, or source/destination/   honoured: copied after grading (pkg/collect),   TestParse_Schema14, TestArtifactsNeverFollowSymlinks,
//	  exclude/service tables)                    reported in the verdict's "collected"         TestTrial_HarborTasks (trial/collect)
//	artifacts[].service other than "main"      refused                                         TestParse_Unsupported
//	multi_step_reward_strategy                 refused (multi-step)                            TestParse_Unsupported
//	[[steps]], steps/ directory                refused (multi-step)                            TestParse_Unsupported, TestLoad_Refusals
//	[task] name, description, authors,         read                                            TestLoad_SchemaVersions, TestParse_Schema14
//	  keywords, version
//	[metadata]                                 read, free-form                                 TestLoad_SchemaVersions
//	[verifier] timeout_sec, user, env          honoured                                        TestLoad_SchemaVersions, TestVerifierEnvNeverIncludesAgentEnv
//	[verifier] network_mode, allowed_hosts     honoured (the verify phase's policy)            TestParse_NetworkInheritancePerPhase
//	[verifier] environment_mode = "shared"     honoured; "separate" refused                    TestParse_Unsupported
//	[verifier.environment]                     refused (a separate verifier)                   TestParse_Unsupported
//	[[verifier.collect]] command, timeout_sec, honoured: visitors after the verifier,          TestParse_Schema14, TestTrial_HarborTasks (trial/collect)
//	  user, service = "main"                     output beside the verdict
//	[[verifier.collect]] service = sidecar     refused                                         TestParse_Unsupported
//	[agent] timeout_sec, user                  honoured (trial: outcome "timeout" past it)     TestTrial_HarborTasks (trial/agent-timeout)
//	[agent] network_mode, allowed_hosts        honoured (the agent phase's policy)             TestParse_NetworkInheritancePerPhase
//	[agent] env                                honoured (sandboxd's, as HUD's adapter reads it) TestPhaseEnv_FileOrderAndOverrideInPlace
//	[environment] build_timeout_sec,           honoured by adapt (build, resources, manifest)  TestLoad_SchemaVersions, TestParse_LegacySizes
//	  docker_image, cpus, memory_mb,
//	  storage_mb, memory, storage
//	[environment] workdir                      honoured                                        TestLoad_ImageFactsFillUnsetPhaseValues
//	[environment] os = "linux"                 honoured; "windows" refused                     TestParse_Unsupported
//	[environment] gpus, gpu_types              honoured (device nodes); TPU names refused      TestParse_Unsupported
//	[environment.tpu], tpus                    refused                                         TestParse_Unsupported
//	[environment] network_mode, allowed_hosts, honoured (the baseline policy)                  TestParse_NetworkInheritancePerPhase
//	  allow_internet (legacy)
//	[environment] env, [solution] env          honoured: whole and embedded ${VAR},            TestExpandEnv, TestRefs, TestTrial_HarborTasks (trial/env-interpolation),
//	                                             ${VAR:-default}; unset without default refused TestTrial_UnsetEnvWithoutDefaultRefuses
//	[environment.healthcheck] command,         honoured: trial starts the agent after the      TestParse_HealthcheckDefaults, TestHealthcheckReportsStartingHealthyUnhealthy,
//	  interval_sec, timeout_sec,                 first pass, "unhealthy" first ends it;        TestTrial_HarborTasks (trial/healthcheck-late, trial/healthcheck-never)
//	  start_period_sec, start_interval_sec,      serve reports it in status
//	  retries
//	[[environment.mcp_servers]]                refused unless empty (no agent is installed)    TestParse_Unsupported
//	[environment] skills_dir                   refused (no agent is installed)                 TestParse_Unsupported
//
// Keys that are in no schema are ignored with a warning in Task.Warnings
// ("task.toml:LINE: unknown key "x.y" (ignored)"), as Harbor ignores them,
// and serve and trial log it. Syntax errors, wrong types and out-of-range
// values are errors (*FieldError) that name the file, line and key and say
// what to write instead. environment/docker-compose.yaml is not refused:
// Load records its path in Task.ComposeFile for adapt.
//
// # Environments
//
// Env tables keep the order the file wrote them in. The phase views merge
// layers in that order, a later layer replacing an earlier value in place:
//
//	AgentEnv    = environment.env + agent.env
//	VerifierEnv = environment.env + verifier.env   (never agent.env)
//	SolutionEnv = environment.env + solution.env
//
// The daemon puts the image's ENV (Sandboxd.ImageEnv) beneath these.
// ExpandEnv fills references from the host: a value that is exactly
// "${VAR}" or "${VAR:-default}" as Harbor's resolve_env_vars reads it (the
// default runs to the value's last "}"), and references inside a longer
// value, several to a value ("https://${HOST:-example.com}:${PORT}/v1",
// where a default ends at the first "}"). A reference with neither a host
// value nor a default is an error naming the variable, as Harbor refuses
// the run ("not found in host environment"); text that is no reference
// ("$X", "${:-x}", "${X:y}", "${" without "}") stays literal.
//
// # sandboxd.toml
//
// An optional file next to task.toml for what sandboxd needs and Harbor's
// schema lacks. Every key is optional; unknown keys warn as in task.toml.
// adapt writes the image keys from the base image's config; people write the
// rest.
//
//	# SSH listen address of `sandboxd serve` (host:port). Default: the daemon's.
//	listen = "0.0.0.0:2222"
//
//	# Public keys that may open agent sessions, one per line as in OpenSSH.
//	# A relative path is relative to the task directory.
//	authorized_keys = "authorized_keys"
//
//	# Non-global ranges the egress proxy may reach although its address guard
//	# refuses private, loopback and link-local addresses (a private package
//	# mirror, say). CIDR prefixes without host bits; one address is "a.b.c.d/32".
//	egress_allow_cidrs = ["10.20.0.0/16"]
//
//	# A substrate service offered inside the sandbox: the sandbox resolves
//	# `name` (a hosts-file line) and connections to name:port are spliced to
//	# `target` in the substrate's network. Names are host names, unique, not
//	# "localhost"; ports 1-65535; target is host:port. Without a task,
//	# `serve --peer db:5432=127.0.0.1:15432` declares the same (ParsePeer).
//	[[peers]]
//	name = "db"
//	port = 5432
//	target = "127.0.0.1:15432"
//
//	# The image's config as adapt read it, for serve: ENTRYPOINT argv (run in
//	# the sandbox as the image user at start), USER, WORKDIR, and ENV entries
//	# as NAME=VALUE in order.
//	entrypoint = ["/docker-entrypoint.sh"]
//	image_user = "app"
//	image_workdir = "/app"
//	image_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]
//
// The image keys are top-level because they are facts of one image, written
// once by a program; a section would only add a level to every lookup.
package task
