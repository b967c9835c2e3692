# Builds lakelog-venv.tar.gz: the lakelog package and its dependencies in a
# relocatable Python 3.11 virtual environment for EMR Serverless, shipped to
# the Spark jobs with `spark.archives=<s3 uri>#environment` (the standard
# EMR Serverless Python-venv pattern). Python is built from source without a
# shared libpython and the venv is made with --copies, so the archive carries
# its own interpreter and standard library and does not depend on the Python
# of the EMR image.
#
# From the repository root (BuildKit):
#   docker build -f infra/emr/venv.Dockerfile --platform linux/amd64 --output type=local,dest=dist .
# writes dist/lakelog-venv.tar.gz. Use --platform linux/arm64 when the
# application's emr_architecture is ARM64.

FROM public.ecr.aws/amazonlinux/amazonlinux:2023 AS build

ARG PYTHON_VERSION=3.11.14
RUN dnf install -y gcc make tar gzip xz findutils openssl-devel bzip2-devel \
      libffi-devel zlib-devel xz-devel sqlite-devel readline-devel \
 && dnf clean all
RUN curl -fsSL "https://www.python.org/ftp/python/${PYTHON_VERSION}/Python-${PYTHON_VERSION}.tgz" | tar xz -C /tmp \
 && cd "/tmp/Python-${PYTHON_VERSION}" \
 && ./configure --prefix=/usr/local --with-ensurepip=install \
 && make -j"$(nproc)" \
 && make altinstall \
 && rm -rf "/tmp/Python-${PYTHON_VERSION}"

ENV VIRTUAL_ENV=/opt/lakelog-venv
RUN python3.11 -m venv --copies "$VIRTUAL_ENV" \
 && cp -r /usr/local/lib/python3.11/* "$VIRTUAL_ENV/lib/python3.11/"
ENV PATH="/opt/lakelog-venv/bin:$PATH"

WORKDIR /src
COPY pyproject.toml README.md ./
COPY lakelog ./lakelog
RUN pip install --no-cache-dir . venv-pack==0.2.0 \
 && mkdir /output \
 && venv-pack -f -o /output/lakelog-venv.tar.gz

FROM scratch AS export
COPY --from=build /output/lakelog-venv.tar.gz /
