# One image for the operator and the console: `heterojob operator run ...` or `heterojob console ...`.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator operator
COPY console console
COPY sdk sdk
# the training SDK too (its own distribution, heterojob-sdk): `heterojob.sdk` re-exports it
RUN pip wheel --no-cache-dir --wheel-dir /wheels ./sdk .

FROM python:3.11-slim
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin heterojob
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001:10001
ENV PYTHONUNBUFFERED=1 HOME=/tmp
EXPOSE 8080 8081 8501
ENTRYPOINT ["heterojob"]
CMD ["operator", "run", "--leader-elect", "heterojob-operator", "--liveness", "http://0.0.0.0:8081/healthz", "--alerts-port", "8080"]
