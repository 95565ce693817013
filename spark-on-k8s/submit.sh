#!/usr/bin/env bash
# Submit a streamlet job to Kubernetes in cluster mode: the driver runs in a pod of the
# cluster, and creates its executors there.
#
#   spark-on-k8s/submit.sh export --stream orders --destination s3a://lake/orders
#   spark-on-k8s/submit.sh aggregate --stream orders
#
# Environment: K8S_API (default https://kubernetes.default.svc:443, as from inside a pod),
# NAMESPACE (default streamlet), IMAGE (default ghcr.io/streamlet/spark:0.1.0), SERVICE_ACCOUNT
# (default streamlet-spark, see manifests/rbac.yaml), BROKER (the broker's Service, default
# streamlet), BROKER_SECRET (a Secret whose key "password" is the broker user's password;
# default <BROKER>-operator), STREAMLET_USER (default streamlet-operator), EXECUTORS (1).
set -euo pipefail

job="${1:?usage: submit.sh export|aggregate [job arguments]}"
shift
case "$job" in
  export) file=export_parquet.py ;;
  aggregate) file=aggregate.py ;;
  *) echo "unknown job $job (export or aggregate)" >&2; exit 2 ;;
esac

K8S_API="${K8S_API:-https://kubernetes.default.svc:443}"
NAMESPACE="${NAMESPACE:-streamlet}"
IMAGE="${IMAGE:-ghcr.io/streamlet/spark:0.1.0}"
# The driver and executor pod templates: the "restricted" Pod Security Standard.
TEMPLATES="$(cd "$(dirname "$0")" && pwd)/pod-templates"
SERVICE_ACCOUNT="${SERVICE_ACCOUNT:-streamlet-spark}"
BROKER="${BROKER:-streamlet}"
BROKER_SECRET="${BROKER_SECRET:-${BROKER}-operator}"
STREAMLET_USER="${STREAMLET_USER:-streamlet-operator}"
EXECUTORS="${EXECUTORS:-1}"
SPARK_SUBMIT="${SPARK_SUBMIT:-spark-submit}"

exec "$SPARK_SUBMIT" \
  --master "k8s://${K8S_API}" \
  --deploy-mode cluster \
  --name "streamlet-${job}" \
  --conf "spark.kubernetes.namespace=${NAMESPACE}" \
  --conf "spark.kubernetes.container.image=${IMAGE}" \
  --conf "spark.kubernetes.authenticate.driver.serviceAccountName=${SERVICE_ACCOUNT}" \
  --conf "spark.kubernetes.driverEnv.STREAMLET_HOST=${BROKER}.${NAMESPACE}.svc" \
  --conf "spark.kubernetes.driverEnv.STREAMLET_USER=${STREAMLET_USER}" \
  --conf "spark.kubernetes.driver.secretKeyRef.STREAMLET_PASSWORD=${BROKER_SECRET}:password" \
  --conf "spark.kubernetes.driver.podTemplateFile=${TEMPLATES}/driver.yaml" \
  --conf "spark.kubernetes.driver.podTemplateContainerName=spark-kubernetes-driver" \
  --conf "spark.kubernetes.executor.podTemplateFile=${TEMPLATES}/executor.yaml" \
  --conf "spark.kubernetes.executor.podTemplateContainerName=spark-kubernetes-executor" \
  --conf "spark.executor.instances=${EXECUTORS}" \
  "local:///opt/streamlet/jobs/${file}" "$@"
