# syntax=docker/dockerfile:1
# AgentChat images: one build, one target per component (agent, policy, operator, sandbox).
#   docker build --target agent -t agentchat-agent .
# The final stages hold the slim Python base, the virtualenv and nothing else: no compilers, no
# pip cache, no sources beyond the installed package (the agent adds the built page: static
# files, no Node). Every target runs as uid 10001 and works
# with a read-only root filesystem (writable state goes to /tmp, an emptyDir in the chart).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG NODE_IMAGE=node:20.20.2-slim

# ---- web: the people's page (web/, served at /api/agent/ui/), built with Node ----
FROM ${NODE_IMAGE} AS web
WORKDIR /web
# The lockfile in its own layer: editing a component does not reinstall node_modules.
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY web/ ./
RUN npm run build

# ---- build: a virtualenv with the project's dependencies, then the project itself ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies come from pyproject.toml itself, in their own layer: editing a source file does not
# reinstall them. Every dependency ships manylinux wheels, so no compiler is needed even here.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --requirement /tmp/requirements.txt
COPY README.md ./
COPY agentchat/ agentchat/
COPY agent/ agent/
COPY policy/ policy/
COPY operator/ operator/
COPY sandbox/ sandbox/
# --no-deps: the dependencies are already in; a non-editable install, so /src is not needed later.
RUN pip install --no-deps . \
    && python -c "import agentchat.agent, agentchat.policy, agentchat.operator, agentchat.sandbox"

# ---- runtime: the base every target shares ----
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 agentchat \
    && useradd --system --uid 10001 --gid agentchat --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin agentchat
COPY --from=build /opt/venv /opt/venv
# Everything that wants to write somewhere points at /tmp: the root filesystem is read-only.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    MPLCONFIGDIR=/tmp/.cache/matplotlib \
    GRADIO_TEMP_DIR=/tmp/gradio \
    GRADIO_ANALYTICS_ENABLED=False \
    AGENTCHAT_DATA_DIR=/tmp/agentchat
WORKDIR /tmp
USER 10001:10001
ENTRYPOINT ["agentchat"]

# ---- the agent: FastAPI + Gradio on 7860, and the built page (only web/build: no Node) ----
FROM runtime AS agent
COPY --from=web /web/build /opt/agentchat/web
ENV AGENTCHAT_AGENT_TUNING__UI_DIR=/opt/agentchat/web
EXPOSE 7860
CMD ["serve", "--host", "0.0.0.0", "--port", "7860"]

# ---- the policy sidecar: loopback only, the agent in the same pod is its one client ----
FROM runtime AS policy
EXPOSE 8181
CMD ["policy", "serve", "--host", "127.0.0.1", "--port", "8181"]

# ---- the operator: kopf, liveness on 8080/healthz ----
FROM runtime AS operator
EXPOSE 8080
CMD ["operator"]

# ---- the sandbox ss-tools API (dev only) ----
FROM runtime AS sandbox
EXPOSE 8800
CMD ["sandbox", "--host", "0.0.0.0", "--port", "8800"]
