// The replay apiserver of deno task bench:watch (bench/lib/replay.ts starts it). Standard library only.
module appservice-bench-replay

go 1.26.0
