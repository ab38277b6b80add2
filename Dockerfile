# syntax=docker/dockerfile:1
# appservice-operator: distroless, nonroot images (user 65532, no shell) in two variants.
#
#   docker build -t appservice-operator:0.1.0 .                          # default: one binary
#   docker build --target deno-run -t appservice-operator:0.1.0-deno .    # deno CLI + program
#
# Both take the Deployment's args after the same entrypoint flags. Build arguments name the base
# images, so the same file builds where no registry is reachable: scripts/image passes local
# images assembled from pinned Debian packages and the deno CLI from npm (see README).
#   DENO_IMAGE     build stages: the deno CLI of the project's version at /usr/bin/deno, run as root
#   RUNTIME_IMAGE  final stages: glibc, libgcc, CA certificates, tzdata, user 65532, no shell
ARG DENO_IMAGE=denoland/deno:debian-2.9.6
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# build: `deno task compile`, i.e. with exactly the permission flags of `deno task start`.
FROM ${DENO_IMAGE} AS build
WORKDIR /src
COPY deno.json deno.lock ./
COPY main.ts ./
COPY lib ./lib
COPY scripts/compile.ts ./scripts/compile.ts
RUN deno install --frozen --entrypoint main.ts
RUN deno task compile --output /out/appservice-operator

# deps: the program (main.ts and the modules it reaches, deno.json and deno.lock trimmed to the
# npm packages it loads) in /app and a DENO_DIR holding only those packages in /deno-dir; see
# scripts/image_app.ts. Exec-form RUN only: a DENO_IMAGE without a shell works too.
FROM ${DENO_IMAGE} AS deps
ENV DENO_DIR=/deno-dir-full
WORKDIR /src
COPY deno.json deno.lock main.ts ./
COPY lib ./lib
COPY scripts/image_app.ts ./scripts/image_app.ts
RUN ["deno", "run", "--allow-read", "--allow-write=/app,/deno-dir", "--allow-run", "--allow-env", "scripts/image_app.ts", "--app", "/app", "--deno-dir", "/deno-dir"]

# deno-run: the pinned deno CLI runs /app/main.ts from the read-only cache (root-owned files,
# readOnlyRootFilesystem in deploy/), with exactly the permission flags of `deno task start`
# (tests/unit/delivery_test.ts compares the two), never resolving or downloading anything
# (--cached-only, --frozen lockfile).
FROM ${RUNTIME_IMAGE} AS deno-run
COPY --from=deps /usr/bin/deno /usr/bin/deno
COPY --from=deps /deno-dir /deno-dir
COPY --from=deps /app /app
ENV DENO_DIR=/deno-dir DENO_NO_UPDATE_CHECK=1 DENO_NO_PROMPT=1
WORKDIR /app
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["/usr/bin/deno", "run", "--cached-only", "--frozen", "--allow-net", "--allow-read", "--allow-env=KUBECONFIG,HOME,KUBERNETES_SERVICE_HOST,KUBERNETES_SERVICE_PORT,APPSERVICE_*,LOG_TOKENS,LOG_STREAM,HTTPS_PROXY,https_proxy,HTTP_PROXY,http_proxy,NO_PROXY,no_proxy,OTEL_DENO,OTEL_DENO_TRACING,OTEL_SDK_DISABLED", "--allow-sys=hostname", "--allow-run", "--v8-flags=--max-semi-space-size=1,--expose-gc", "/app/main.ts"]

# Default target: the standalone binary on distroless cc.
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/appservice-operator /appservice-operator
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["/appservice-operator"]
