# syntax=docker/dockerfile:1
# appservice-operator: a distroless, nonroot image holding one standalone binary.
#
# Build stage: the official Deno image (pinned to the project's Deno version) compiles main.ts with
# `deno task compile`, i.e. with exactly the permission flags of `deno task start`.
# Final stage: distroless cc (glibc, CA certificates, no shell), user 65532, the binary as ENTRYPOINT.

FROM denoland/deno:debian-2.9.6 AS build
WORKDIR /src
COPY deno.json deno.lock ./
COPY main.ts ./
COPY lib ./lib
COPY scripts/compile.ts ./scripts/compile.ts
RUN deno install --frozen --entrypoint main.ts
RUN deno task compile --output /out/appservice-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/appservice-operator /appservice-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/appservice-operator"]
