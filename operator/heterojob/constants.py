"""Names shared by the operator, the simulator and the console: API group, labels, annotations."""

GROUP = "heterojob.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Labels the operator puts on what it creates.
LABEL_JOB = "heterojob.io/job"
LABEL_GENERATION = "heterojob.io/generation"
LABEL_RANK = "heterojob.io/rank"
LABEL_DEVICE_CLASS = "heterojob.io/device-class"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_ROLE = "heterojob.io/role"  # on the operator's own pods: leader or standby (the Service selects the leader)
MANAGED_BY = "heterojob"

# Annotations: where a pod was placed (before the kubelet binds it), and the checkpoint protocol.
ANNOTATION_NODE = "heterojob.io/node"
ANNOTATION_CHECKPOINT_REQUEST = "heterojob.io/checkpoint-request"
ANNOTATION_CHECKPOINT_ACK = "heterojob.io/checkpoint-ack"
# the SDK writes it with its ack: "<id>;start=<unix s>;end=<unix s>" (engine.basics.acks.with_save_time)
ANNOTATION_CHECKPOINT_SAVE_TIME = "heterojob.io/checkpoint-save-time"
ANNOTATION_MIGRATE = "heterojob.io/migrate"  # on a HeteroJob: "<why>" asks for a migration now
ANNOTATION_CHECKPOINT_NOW = "heterojob.io/checkpoint"  # on a HeteroJob: "<why>" asks for a checkpoint now

# Well-known Kubernetes labels (see docs/telemetry.md, section 5).
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_HOSTNAME = "kubernetes.io/hostname"

MASTER_PORT = 29500
# A training container that declares a port of this name opts in to the step metric: the operator sets
# METRICS_PORT_ENV to it, the SDK serves heterojob_training_steps_total there, the shipped PodMonitor scrapes it.
METRICS_PORT_NAME = "heterojob-steps"
METRICS_PORT_ENV = "HETEROJOB_METRICS_PORT"
CHECKPOINT_SIZE_MAX = 1 << 62  # bytes (4 EiB): a larger checkpoint size is not believed
# the reason of the pod condition DisruptionTarget=True the API server adds before an Eviction deletes the pod
# (kube-apiserver pkg/registry/core/pod/storage/eviction.go; PodDisruptionConditions, GA in v1.31)
EVICTED_BY_EVICTION_API = "EvictionByEvictionAPI"
