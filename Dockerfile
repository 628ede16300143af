# mnemofs in a container: the CLI, the daemon that mounts a session's stores at /mnt/memory, and
# the HTTP API server (mode 3 in the README: serve --host 0.0.0.0, port 8080).
#
#   podman build -t mnemofs .            (or docker build; BASE: any Debian-based image with
#                                          python3 and its venv module)
#
# Two stages: the first compiles pyfuse3 against libfuse3 into a virtual environment, the second
# carries only that environment, fuse3 (fusermount3) and Python. The image runs as the
# non-root user "agent" (uid 1000); the daemon needs root inside the container only to mount
# (mode 2 in the README: --device /dev/fuse --cap-add SYS_ADMIN --user root).
ARG BASE=python:3.12-slim

FROM ${BASE} AS build
# PIP_CERT: a CA bundle for reaching the package index through a proxy (bind it into the build).
ARG PIP_CERT=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libfuse3-dev \
 && if ! python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then \
      apt-get install -y --no-install-recommends python3-dev; fi \
 && rm -rf /var/lib/apt/lists/*
# Dependencies first, from pyproject.toml alone (an empty package stands in), so a change to
# the source rebuilds only the last, seconds-long layer.
COPY pyproject.toml /src/
RUN mkdir -p /src/src/mnemofs && touch /src/README.md /src/src/mnemofs/__init__.py \
 && python3 -m venv /opt/mnemofs \
 && /opt/mnemofs/bin/pip install ${PIP_CERT:+--cert "$PIP_CERT"} "setuptools>=77" "/src[postgres,fuse,server]"
COPY README.md /src/
COPY src /src/src
RUN /opt/mnemofs/bin/pip install --no-deps --no-build-isolation --force-reinstall /src \
 && /opt/mnemofs/bin/mnemofs --version

FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 \
 && rm -rf /var/lib/apt/lists/* \
 && sed -i 's/^#\s*user_allow_other/user_allow_other/' /etc/fuse.conf \
 && groupadd --gid 1000 agent \
 && useradd --uid 1000 --gid 1000 --create-home --shell /bin/sh agent \
 && mkdir -p /mnt/memory /data \
 && chown agent:agent /data
COPY --from=build /opt/mnemofs /opt/mnemofs
ENV PATH=/opt/mnemofs/bin:$PATH \
    MNEMOFS_DB=/data/mnemofs.db \
    PYTHONUNBUFFERED=1
VOLUME /data
EXPOSE 8080
USER agent
WORKDIR /home/agent
ENTRYPOINT ["mnemofs"]
CMD ["--help"]
