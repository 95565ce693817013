#!/bin/bash
# The container contract of Spark on Kubernetes: the driver pod runs "driver <spark-submit
# args>", executor pods run "executor" with their settings in SPARK_* environment variables
# (set by Spark's Kubernetes scheduler backend). Anything else is executed as given.
set -euo pipefail

SPARK_CLASSPATH="${SPARK_CLASSPATH:-}:${SPARK_HOME}/jars/*"
if [ -n "${PYSPARK_PYTHON:-}" ]; then export PYSPARK_PYTHON; fi

case "${1:-}" in
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # SPARK_JAVA_OPT_0, _1...: the executor's JVM options, in order
    mapfile -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH}:${SPARK_DIST_CLASSPATH:-}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-}"
    ;;
  *)
    exec "$@"
    ;;
esac
