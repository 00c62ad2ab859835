"""Reading finished runs: comparisons between methods and models, paired tests, ranking statistics
(Kendall tau, Spearman rho with bootstrap intervals) and the HTML report with its plots. Reads run
folders through store; never loads a model. Imports store and the leaves."""
