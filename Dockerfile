# syntax=docker/dockerfile:1
# The Capstan host as a small static, non-root image: one musl-static binary on
# distroless/static (CA certificates, /etc/passwd with uid 65532, no shell, no libc).
# Plugins are not baked in; the Helm chart mounts them (ConfigMap or any volume).
#
#   docker build -t ghcr.io/capstan-dev/capstan:0.1.0 .
#
# .ci/run builds the same binary the same way (there is no container engine in CI):
#   CC_x86_64_unknown_linux_musl=musl-gcc CARGO_PROFILE_RELEASE_STRIP=symbols \
#     cargo build --release --locked --target x86_64-unknown-linux-musl -p capstan --bin capstan

ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# ring's C and assembly need a musl C compiler; everything else is Rust. Symbols stripped:
# 31 MB instead of 40 (most of it Wasmtime and Cranelift).
ENV CC_x86_64_unknown_linux_musl=musl-gcc CARGO_PROFILE_RELEASE_STRIP=symbols
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-musl -p capstan --bin capstan \
    && cp target/x86_64-unknown-linux-musl/release/capstan /capstan

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /capstan /usr/local/bin/capstan
# The chart runs as 65532 too (runAsNonRoot needs a numeric user).
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/capstan"]
CMD ["run", "--help"]
