"""The API group and version of the custom resources, and the operator's own names."""

GROUP = "streamlet.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
FINALIZER = "streamlet.dev/finalizer"
ANNOTATION_PREFIX = "operator.streamlet.dev"
