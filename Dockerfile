# syntax=docker/dockerfile:1
# One image for every docstream service: the command picks the service
# (`docstream ingest|chunker|inference|reducer|api`).
#
# The repository is copied to /app and installed editable: the code finds schemas/
# by walking up from the package to the repository root, which a non-editable
# `pip install .` (site-packages) would not have. See docs/operations.md.
#
# torch is pinned in pyproject.toml; from PyPI on x86_64 that is the CUDA build
# (works on CPU too, but the image is several GB). For a CPU-only image, pass the
# PyTorch CPU wheel index: --build-arg TORCH_INDEX_URL=<cpu wheel index URL>.
FROM python:3.11-slim AS runtime

ARG TORCH_INDEX_URL=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    HF_HOME=/tmp/.cache/huggingface \
    DOCSTREAM_LOG__FORMAT=json \
    DOCSTREAM_REDUCER__DATA_DIR=/data/reducer \
    DOCSTREAM_STORE__SQLITE_PATH=/data/docstream.db \
    DOCSTREAM_OBJECT_STORE__URL=/data/objects

WORKDIR /app

# OCR: Debian's Tesseract language data (PyMuPDF has Tesseract built in; docs/chunking.md "OCR engines").
COPY deploy/install-ocr.sh /tmp/install-ocr.sh
RUN bash /tmp/install-ocr.sh && rm -rf /var/lib/apt/lists/* /tmp/install-ocr.sh

# Dependencies first, from pyproject.toml and requirements.lock alone, so code changes reuse this layer;
# each at the version requirements.lock pins (`make lock`), so that the image runs what the tests ran.
COPY pyproject.toml README.md requirements.lock ./
RUN set -eux; \
    python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt; \
    if [ -n "$TORCH_INDEX_URL" ]; then \
        torch_pin=$(grep -E '^torch==' /tmp/requirements.txt); \
        pip install --index-url "$TORCH_INDEX_URL" "$torch_pin"; \
    fi; \
    pip install -r /tmp/requirements.txt -c requirements.lock; \
    rm /tmp/requirements.txt

# The code, installed editable in place (no dependency resolution again).
COPY . /app
RUN set -eux; \
    pip install --no-deps -e /app; \
    useradd --system --uid 10001 --gid 0 --home-dir /tmp --shell /usr/sbin/nologin docstream; \
    mkdir -p /data/objects /data/reducer; \
    chown -R 10001:0 /data; \
    chmod -R g=u /data; \
    docstream --help > /dev/null

USER 10001
EXPOSE 8080 9000
CMD ["docstream", "--help"]
