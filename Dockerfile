# Tollgate server image: a static binary on distroless, running as non-root.
#
#   docker build -t tollgate --build-arg VERSION=v0.1.0 .
#   docker run -p 7070:7070 -p 7071:7071 -v tollgate-data:/data tollgate
#
# The build stage runs scripts/build-static, which .ci/run also runs without
# Docker.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN scripts/build-static /out/tollgate "$VERSION"
# The data directory, owned by distroless's nonroot user (65532).
RUN mkdir -p /out/data && chown 65532:65532 /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tollgate /tollgate
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
EXPOSE 7070 7071
# Inside a container, 127.0.0.1 is unreachable from outside, so the server
# listens on 0.0.0.0. serve refuses a non-loopback address without TLS and
# authentication unless told --insecure-allow-remote: this default is for a
# trusted network only. Anywhere else, mount a certificate and an admin
# token and replace the command, for example:
#   serve --data-dir /data --listen 0.0.0.0:7070 --http 0.0.0.0:7071 \
#     --tls-cert /tls/tls.crt --tls-key /tls/tls.key --admin-token-file /secrets/admin-token
ENTRYPOINT ["/tollgate"]
CMD ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:7070", "--http", "0.0.0.0:7071", "--insecure-allow-remote", "--log-format", "json"]
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/tollgate", "healthcheck", "--url", "http://127.0.0.1:7071/readyz", "--timeout", "4s"]
