"""Helpers shared between the pipeline's stages (model, kinematics, formulations, integrate,
analysis, batch): array types, small linear-algebra kernels, argument checks. Nothing here is
public API; each stage imports what it needs from these modules."""
