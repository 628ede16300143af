# mnemofs in a container: the CLI, the daemon that mounts a session's stores at /mnt/memory, and
# the HTTP API server (mode 3 in the README: serve --host 0.0.0.0, port 8080).
#
#   podman build -t mnemofs .            (or docker build; BASE: any Debian-based image with
#                                          python3 and its venv module)
#   podman build --target sandbox -t mnemofs-sandbox .
#                                        the sandbox's image: the mount and the sync worker
#                                        reaching a server with a session token, nothing for
#                                        a database or a server (mode 2 over the server)
#
# The build stage compiles pyfuse3 against libfuse3 into two virtual environments, the whole
# one and the sandbox's; the images carry only their environment, fuse3 (fusermount3) and
# Python. They run as the non-root user "agent" (uid 1000); the daemon needs root inside the
# container only to mount (mode 2 in the README: --device /dev/fuse --cap-add SYS_ADMIN --user
# root).
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
# The sandbox's: click and the fuse extra, as pyproject.toml names them (pip and setuptools go
# once mnemofs is in: nothing installs there later).
RUN python3 -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]; print("\n".join([d for d in p["dependencies"] if d.startswith("click")] + p["optional-dependencies"]["fuse"]))' > /tmp/sandbox.txt \
 && python3 -m venv /opt/mnemofs-sandbox \
 && /opt/mnemofs-sandbox/bin/pip install ${PIP_CERT:+--cert "$PIP_CERT"} -r /tmp/sandbox.txt
COPY README.md /src/
COPY src /src/src
RUN /opt/mnemofs/bin/pip install --no-deps --no-build-isolation --force-reinstall /src \
 && /opt/mnemofs/bin/pip wheel --no-deps --no-build-isolation -w /tmp/wheel /src \
 && /opt/mnemofs-sandbox/bin/pip install --no-deps /tmp/wheel/mnemofs-*.whl \
 && /opt/mnemofs-sandbox/bin/python3 -m pip uninstall -y -q pip setuptools \
 && /opt/mnemofs/bin/mnemofs --version \
 && /opt/mnemofs-sandbox/bin/mnemofs --version

FROM ${BASE} AS runtime
# apt-get clean: a base image without the official ones' docker-clean setting keeps the
# downloaded packages (75 MB here).
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && sed -i 's/^#\s*user_allow_other/user_allow_other/' /etc/fuse.conf \
 && groupadd --gid 1000 agent \
 && useradd --uid 1000 --gid 1000 --create-home --shell /bin/sh agent \
 && mkdir -p /mnt/memory
ENV PYTHONUNBUFFERED=1
WORKDIR /home/agent
ENTRYPOINT ["mnemofs"]
CMD ["--help"]

FROM runtime AS sandbox
# At the path it was made at: a virtual environment's scripts name their interpreter by it.
COPY --from=build /opt/mnemofs-sandbox /opt/mnemofs-sandbox
ENV PATH=/opt/mnemofs-sandbox/bin:$PATH
USER agent

FROM runtime
RUN mkdir -p /data && chown agent:agent /data
COPY --from=build /opt/mnemofs /opt/mnemofs
ENV PATH=/opt/mnemofs/bin:$PATH \
    MNEMOFS_DB=/data/mnemofs.db
VOLUME /data
EXPOSE 8080
USER agent
