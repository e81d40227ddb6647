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
# The container binds 0.0.0.0 so a published port reaches it. Without API keys orca refuses
# that unless told: give keys in the config, or run with
# -e ORCA_SERVER__ALLOW_UNAUTHENTICATED_PUBLIC_BIND=true and publish on the host's loopback
# only (-p 127.0.0.1:8080:8080). See docs/operating.md.
ENV ORCA_CONFIG=/etc/orca/orca.toml \
    ORCA_BIND=0.0.0.0:8080 \
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
