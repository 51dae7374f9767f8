# plot.gp: bus bandwidth against size for one collective; compare.sh calls
#   gnuplot -e "datafile='busbw-allreduce.dat'; outfile='busbw-allreduce.png'"
#           -e "chart_title='allreduce'; ncol=5; term='pngcairo'" plot.gp
# datafile: tab-separated with a header row; column 1 the size in bytes,
# column 2 its label, then one column per series (busbw in GB/s, "?" where
# there is no value), nseries per process count: zcopy, each peer, roofline.
if (!exists("term")) term = "png"
if (!exists("chart_title")) chart_title = datafile
eval sprintf("set terminal %s size 960,600", term)
set output outfile

set datafile separator "\t"
set datafile missing "?"
set title chart_title noenhanced
set xlabel "size (bytes, nccl-tests convention)"
set ylabel "busbw (GB/s)"
set logscale x 2
set logscale y 10
set format x "%.0b%B"
set grid xtics ytics mytics
set key top left noenhanced
set pointsize 0.8

# Colour by mode (zcopy, each peer, the roofline last in grey), dash
# pattern by process count; nseries modes per process count.
if (!exists("nseries")) nseries = 3
mode(i) = (i - 3) % nseries
npidx(i) = (i - 3) / nseries
colour(k) = k == nseries - 1 ? "#7f7f7f" : \
            word("#1f77b4 #d62728 #2ca02c #ff7f0e #9467bd #8c564b", k + 1)
plot for [i = 3:ncol] datafile using 1:i title columnheader(i) \
     with linespoints lw 2 pt (mode(i) + 5) \
     lc rgb colour(mode(i)) dt npidx(i) + 1
