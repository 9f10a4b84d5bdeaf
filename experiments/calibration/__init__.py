"""`batchtwin calibrate` and `batchtwin fidelity`: fitting a cost model to measured steps and checking the simulator against real runs."""
