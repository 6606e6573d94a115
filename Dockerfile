# syntax=docker/dockerfile:1
# The Capstan host as a small non-root image: one glibc binary on distroless/cc
# (glibc, libgcc, CA certificates, /etc/passwd with uid 65532, no shell).
# Plugins are not baked in; the Helm chart mounts them (ConfigMap or any volume).
#
#   docker build -t ghcr.io/capstan-dev/capstan:0.1.0 .
#
# Not musl-static: every reconcile allocates JSON trees, and musl's allocator made Echo's
# dispatch 1.3× slower on one thread (44 vs 34 µs) and 4× slower per call on two (152 vs
# 36 µs: one global lock). Swapping in mimalloc doubled the host's peak RSS instead.
#
# `capstan dev image` builds the same image offline (no engine, no registry) for the local
# plane's real node; a test (host/dev/src/image/capstan.rs) holds the two to the same
# user, entrypoint, command, ports, labels and binary path.

ARG RUST_VERSION=1.95
# Builder and runtime are both Debian 12, so the binary's glibc symbols exist at runtime.
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
# Symbols stripped: most of the binary is Wasmtime and Cranelift. No default features:
# `capstan dev` (the local control plane) has no place in a cluster.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p capstan --bin capstan --no-default-features \
    && cp target/release/capstan /capstan

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="capstan" \
      org.opencontainers.image.description="Kubernetes reconcilers as sandboxed WebAssembly plugins" \
      org.opencontainers.image.source="https://github.com/capstan-dev/capstan" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /capstan /usr/local/bin/capstan
# The chart runs as 65532 too (runAsNonRoot needs a numeric user).
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/capstan"]
CMD ["run", "--help"]
