# How the scripts run a container on this host kind, sourced by images.sh and release.sh:
# runc and cgroupfs (crun refuses a hybrid cgroup hierarchy, and PID 1 is not systemd),
# and explicit limits (podman's defaults are above the host's hard limits, which a
# container's init may not raise without CAP_SYS_RESOURCE; a relay needs a few thousand
# files and a few dozen threads).
#
#   "${podman_run[@]}" run --rm "${podman_limits[@]}" IMAGE ARGS…
podman_run=(podman --runtime "$(command -v runc)" --cgroup-manager cgroupfs)
podman_limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=4096:4096")
