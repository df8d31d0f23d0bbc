# syntax=docker/dockerfile:1
# The flowline image: the flowline binary on a distroless base, run as a non-root UID.
# The same image serves every role: `operator` (default), `api`, `crdgen`, `api-key`,
# and `flowline step` inside step Jobs (the job executor's --step-image).
#
#   docker build -t flowline:0.1.0 .
#   docker run --rm flowline:0.1.0 --help

# --- build -------------------------------------------------------------------------------
# The toolchain the project is developed and tested with (Cargo.toml: rust-version 1.89+).
FROM rust:1.95-bookworm AS build
WORKDIR /src
# .dockerignore is an allowlist: the context holds only what cargo reads.
COPY . .
# Cache mounts keep the registry and target/ between builds; the binary is copied out of
# the mount because a mount's content is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin flowline \
 && cp target/release/flowline /flowline

# --- runtime -----------------------------------------------------------------------------
# distroless/cc: glibc and libgcc for the Rust binary, CA certificates (webhook deliveries,
# http.request steps), tzdata; no shell, no package manager. The :nonroot tag runs as
# UID/GID 65532, the UID the Helm chart's podSecurityContext sets.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /flowline /usr/local/bin/flowline
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/flowline"]
CMD ["operator", "--listen", "0.0.0.0:8080", "--log-format", "json"]
