# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run as a non-root user in a slim Debian.
#
# Dependencies build in a layer of their own (keyed on Cargo.toml and Cargo.lock only, with
# stand-in sources), so an edit to orca's own code recompiles orca alone, not its ~400 crates.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# Stand-ins for every target Cargo.toml names (the binary, the library, the test binary).
RUN mkdir -p src tests/it \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs tests/it/main.rs \
 && cargo build --release --locked \
 && rm -rf src tests target/release/orca target/release/deps/orca-* target/release/deps/liborca-* \
      target/release/.fingerprint/orca-*
COPY src ./src
COPY migrations ./migrations
COPY build.rs ./
COPY schemas ./schemas
# Cargo.toml names the integration-test target; cargo wants its files present to read the manifest.
COPY tests ./tests
COPY examples ./examples
RUN cargo build --release --locked && strip target/release/orca

FROM debian:bookworm-slim
# Unpinned on purpose: the slim image's own package set decides the versions (see .hadolint.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/orca --create-home orca \
 && mkdir -p /var/lib/orca/workspace /etc/orca \
 && chown -R orca:orca /var/lib/orca
COPY --from=build /src/target/release/orca /usr/local/bin/orca
COPY config/default.toml /etc/orca/orca.toml
# The orca user, by number: a host (Kubernetes' runAsNonRoot) can check it without /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/orca
# The container binds 0.0.0.0, since only that reaches a published port (loopback inside a
# container is the container's own). Outside a container orca refuses a public bind without
# API keys; the image opts in, so `docker run -p 127.0.0.1:8080:8080 orca` just works, and
# every start without keys logs a warning saying who can reach it and how to set keys
# (-e ORCA_AUTH__API_KEYS='[{ key = "...", tenant = "default" }]'). Publish on the host's
# loopback only unless keys are set. See docs/operating.md.
ENV ORCA_CONFIG=/etc/orca/orca.toml \
    ORCA_BIND=0.0.0.0:8080 \
    ORCA_SERVER__ALLOW_UNAUTHENTICATED_PUBLIC_BIND=true \
    DATABASE_URL=sqlite:///var/lib/orca/orca.db \
    ORCA_TOOLS__WORKSPACE_DIR=/var/lib/orca/workspace \
    RUST_LOG=info
VOLUME ["/var/lib/orca"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["curl", "-fsS", "http://127.0.0.1:8080/healthz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/orca"]
CMD ["serve"]
