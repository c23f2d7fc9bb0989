# The demo-api image: the static binary on an empty base (scratch), with CA
# certificates, a user that is not root, and no shell.
#
#   make image          builds the binary outside (CGO_ENABLED=0, for Linux)
#                       into bin/image, then the target "image": nothing to pull
#   docker compose up   builds the target "source": the same image, with the
#                       binary built from this folder in a golang stage
#
# The health check is the binary's own (demo-api healthcheck: GET /healthz on
# LISTEN_ADDR), as the image has no shell or curl.
#
# On SIGTERM serve stops accepting and lets in-flight requests finish for
# SHUTDOWN_TIMEOUT (25s): give the container longer than that to stop
# (docker stop -t 35, docker run --stop-timeout 35; compose sets
# stop_grace_period), not docker's default 10s (docs/running.md).

FROM scratch AS base
ENV LISTEN_ADDR=:8080 LOG_FORMAT=json
EXPOSE 8080
USER 65532:65532
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/demo-api", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/demo-api"]
CMD ["serve"]

# make image: bin/image holds demo-api and etc/ssl/certs/ca-certificates.crt.
FROM base AS image
COPY bin/image/ /

# docker compose up: built here. (The classic builder stops at make image's
# target, so it never pulls golang.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/demo-api ./cmd/demo-api && \
    mkdir -p /out/etc/ssl/certs && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/

FROM base AS source
COPY --from=build /out/ /
