#!/usr/bin/env bash
# mpirun with the settings this project needs on any machine: allowed as root, more ranks than
# cores allowed, fast local transports. Usage: scripts/mpirun.sh -np 2 build/amp_ddp CONFIG [...]
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
# Containers often forbid the cross-memory-attach syscalls vader would use for large messages.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
exec mpirun "$@"
